// Package mempool is an Arrow memory.Allocator that hands freed buffers out again.
//
// A source that builds a record batch per chunk and releases it once sent allocates the same few
// megabytes over and over. With Arrow's GoAllocator every chunk's buffers are fresh: the Go runtime
// zeroes them, collects them and returns their pages to the kernel, and the next chunk faults them
// back in. In the Postgres snapshot that churn cost about a quarter of the plugin's CPU
// (BENCHMARKS.md). Buffers here come in power-of-two capacities and wait in one sync.Pool per
// capacity, so the garbage collector can still drop them when memory is needed elsewhere, and a
// buffer never freed is simply collected.
//
// Free must be called only by the buffer's last user; Arrow's reference counting does that.
package mempool

import (
	"math/bits"
	"sync"
)

const (
	minShift = 6  // 64 bytes: smaller buffers are not worth pooling, and 64 keeps Arrow's alignment
	maxShift = 28 // 256 MiB: larger buffers are allocated and collected as usual
)

// Allocator implements github.com/apache/arrow-go/v18/arrow/memory.Allocator.
// Buffers it returns are zeroed, as the GoAllocator's are.
type Allocator struct {
	pools [maxShift + 1]sync.Pool // pools[s] holds *[]byte of capacity 1<<s
}

// New returns an empty pool.
func New() *Allocator { return &Allocator{} }

// shift is the smallest s with 1<<s >= size, at least minShift; -1 when size is too large to pool.
func shift(size int) int {
	if size <= 1<<minShift {
		return minShift
	}
	s := bits.Len(uint(size - 1))
	if s > maxShift {
		return -1
	}
	return s
}

func (a *Allocator) Allocate(size int) []byte {
	s := shift(size)
	if s < 0 {
		return make([]byte, size)
	}
	if p, ok := a.pools[s].Get().(*[]byte); ok {
		b := (*p)[:size]
		clear(b)
		return b
	}
	// Power-of-two capacities of 64 bytes and up start at a multiple of 64 in Go's size classes.
	return make([]byte, size, 1<<s)
}

func (a *Allocator) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		old := len(b)
		b = b[:size]
		if size > old {
			clear(b[old:])
		}
		return b
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

func (a *Allocator) Free(b []byte) {
	c := cap(b)
	if c < 1<<minShift || c > 1<<maxShift || c&(c-1) != 0 {
		return // not one of ours (or too large to keep): the collector takes it
	}
	b = b[:0]
	a.pools[bits.TrailingZeros(uint(c))].Put(&b)
}
