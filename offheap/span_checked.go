//go:build sharedmap_checked

package offheap

// spanChecks: every Span access is checked (see Span).
const spanChecks = true
