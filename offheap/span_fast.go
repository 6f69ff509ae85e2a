//go:build !sharedmap_checked

package offheap

// spanChecks: a Span trusts its user's offsets (see Span).
const spanChecks = false
