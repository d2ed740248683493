package serve

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
)

// HeapProfileEnv names the environment variable that makes a plugin process write Go heap profiles: set to a
// path prefix P, every SIGUSR1 writes P.<pid>.<n> (n = 1, 2, …) and a clean exit writes P.<pid>, each after a
// GC so the profile's in-use figures are the live heap, and logs the runtime's memory figures beside it. Off
// when unset. It exists because a destination's memory is only visible in its own process: a profile taken
// in the host or in a test process shows the host's or a stand-in's allocations instead. The host passes it
// on through client.Config.Env (the bench does when its own environment has it); `go tool pprof` reads the
// files. Read the process's RSS beside it: the heap profile does not show memory outside Go's heap (cgo).
const HeapProfileEnv = "SKIPPR_PLUGIN_HEAP_PROFILE"

// heapProfiles serves HeapProfileEnv until ctx ends; the returned function writes the exit profile. Both are
// no-ops when the variable is unset.
func heapProfiles(ctx context.Context, log *slog.Logger) (atExit func()) {
	prefix := os.Getenv(HeapProfileEnv)
	if prefix == "" {
		return func() {}
	}
	prefix = fmt.Sprintf("%s.%d", prefix, os.Getpid())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(sig)
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				writeHeapProfile(fmt.Sprintf("%s.%d", prefix, n), log)
			}
		}
	}()
	return func() { writeHeapProfile(prefix, log) }
}

// writeHeapProfile writes the heap profile to path and logs the memory figures; a failure is logged, never
// fatal: profiling must not stop a plugin.
func writeHeapProfile(path string, log *slog.Logger) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f, err := os.Create(path)
	if err == nil {
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		log.Error("write heap profile", "path", path, "err", err)
		return
	}
	log.Info("wrote heap profile", "path", path, "heap_alloc", ms.HeapAlloc, "heap_sys", ms.HeapSys,
		"heap_released", ms.HeapReleased, "sys", ms.Sys, "num_gc", ms.NumGC)
}
