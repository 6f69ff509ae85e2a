// Package rediscache keeps one host-wide cache of Redis keys in a sharedmap
// file, shared by every process of the host and kept fresh by one tracking
// connection per host.
package rediscache
