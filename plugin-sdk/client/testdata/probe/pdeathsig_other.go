//go:build !linux

package main

func pdeathsig() int { return 0 }
