//go:build !linux

package client

import "os/exec"

// dieWithHost has no equivalent outside Linux: serve's parent watch ends an orphaned plugin there.
func dieWithHost(*exec.Cmd) {}

func onStartThread[T any](start func() (T, error)) (T, error) { return start() }

// processGone is never sure elsewhere: the socket directories of dead engines stay.
func processGone(int) bool { return false }
