// Package testhook marks the steps of the code that changes a map file in
// ways a death must not spoil (compaction, recovery's rebuild), so that
// tests can stop a process at any one of them: in-process by panicking, or
// for real by SIGKILL from a helper process. Outside tests it does
// nothing.
package testhook

// OnStep, set only by tests (before the code under test runs, and not
// changed while it runs), is called at each step.
var OnStep func()

// Step calls OnStep if a test set it.
func Step() {
	if OnStep != nil {
		OnStep()
	}
}

// OnGrowStep, set only by tests, is called at each step of lengthening a
// map file, with the step's name.
var OnGrowStep func(step string)

// GrowStep calls OnGrowStep if a test set it.
func GrowStep(step string) {
	if OnGrowStep != nil {
		OnGrowStep(step)
	}
}

// OnSplitStep, set only by tests, is called at each step of splitting a
// segment, with the step's name.
var OnSplitStep func(step string)

// SplitStep calls OnSplitStep if a test set it.
func SplitStep(step string) {
	if OnSplitStep != nil {
		OnSplitStep(step)
	}
}
