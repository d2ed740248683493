package main

import (
	"syscall"
	"unsafe"
)

// pdeathsig is the signal the kernel sends this process when the thread that started it exits.
func pdeathsig() int {
	var sig int32
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0); errno != 0 {
		return -1
	}
	return int(sig)
}
