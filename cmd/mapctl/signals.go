package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// interrupts is the interrupt and termination signals this process did not
// inherit as ignored. A command started with SIGINT ignored (a shell does
// that to a job it runs in the background) must go on ignoring it, and
// catching the signal would undo that (see signal.Ignored).
func interrupts() []os.Signal {
	var sigs []os.Signal
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}

// interruptContext is signal.NotifyContext for interrupts(). With none to
// catch it returns a context that only stop ends: NotifyContext with no
// signals would catch every signal.
func interruptContext() (context.Context, context.CancelFunc) {
	if sigs := interrupts(); len(sigs) > 0 {
		return signal.NotifyContext(context.Background(), sigs...)
	}
	return context.WithCancel(context.Background())
}

// notifyInterrupts relays interrupts() to c, if there are any to catch.
func notifyInterrupts(c chan<- os.Signal) {
	if sigs := interrupts(); len(sigs) > 0 {
		signal.Notify(c, sigs...)
	}
}
