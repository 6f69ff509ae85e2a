package wait

import "time"

// The phases of a wait. Chosen for 2-core machines where waiters usually
// outnumber cores: a holder on the other core releases within a few
// microseconds, so a short spin catches that case; beyond it, spinning only
// steals the CPU the holder needs, so the waiter yields a few times and
// then sleeps. The values are reasoned, not tuned: with them, 8 processes
// waiting 2 s on 2 cores burn 0.27 s of CPU in total
// (rwulock TestWaitersBurnLittleCPU).
const (
	spinRounds  = 16 // attempts separated by a burst of spinCycles pause hints
	spinCycles  = 30 // pause hints per spin round
	yieldRounds = 4  // attempts separated by an OS yield

	// FirstNap and MaxNap bound one sleep. Sleeps grow from FirstNap to MaxNap
	// so that a waiter whose waker died (or that has no waker) still
	// re-checks its condition, at a cost of at most 1/MaxNap wakeups a second.
	FirstNap = 50 * time.Microsecond
	MaxNap   = 10 * time.Millisecond
)

// Policy tracks how long one waiter has waited and says what to do next. The
// zero value is a fresh waiter. It is not shared: each waiting goroutine has
// its own.
type Policy struct {
	attempts int
	nap      time.Duration
}

// Pause spins or yields and reports true while the waiter is in its
// spinning phases; once it returns false the caller should sleep (see Nap).
func (p *Policy) Pause() bool {
	p.attempts++
	switch {
	case p.attempts <= spinRounds:
		Spin(spinCycles)
		return true
	case p.attempts <= spinRounds+yieldRounds:
		Yield()
		return true
	}
	return false
}

// Nap returns the next sleep bound, growing from FirstNap to MaxNap and never
// past the deadline. A zero result means the deadline has passed.
func (p *Policy) Nap(deadline time.Time) time.Duration {
	if p.nap == 0 {
		p.nap = FirstNap
	} else if p.nap < MaxNap {
		p.nap *= 2
		if p.nap > MaxNap {
			p.nap = MaxNap
		}
	}
	left := time.Until(deadline)
	if left <= 0 {
		return 0
	}
	if left < p.nap {
		return left
	}
	return p.nap
}

// SkipSpin ends the spinning phases at once: the next Pause returns false,
// so the waiter sleeps. For waiters that know they will not be served soon.
func (p *Policy) SkipSpin() {
	if p.attempts < spinRounds+yieldRounds {
		p.attempts = spinRounds + yieldRounds
	}
}
