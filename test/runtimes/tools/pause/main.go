// Command pause is the sandbox ("pause") process of the pod images the
// runtime suites build: it does nothing until SIGTERM or SIGINT. As PID 1 of
// a PID namespace a process gets only the signals it handles, so it must
// catch them itself to stop at once.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
