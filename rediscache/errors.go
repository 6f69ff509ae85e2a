package rediscache

import "errors"

// ErrNotFound is returned by Get, GetInto and Typed.Get when the key is
// absent in Redis.
var ErrNotFound = errors.New("rediscache: key not found")

// errAbsent is what a fill returns for a key absent in Redis when absences
// are not cached: GetOrLoad stores nothing for an error.
var errAbsent = errors.New("rediscache: absent in Redis")

// The tracker's ways of ending a tracking connection.
var (
	errDeposed  = errors.New("rediscache: tracker deposed")
	errStopping = errors.New("rediscache: closing")
	errNoPong   = errors.New("rediscache: no PONG within MaxStaleness")
)
