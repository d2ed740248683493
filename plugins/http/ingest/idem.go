package ingest

import (
	"sync"
	"time"
)

// idemStore remembers Idempotency-Keys in memory: a key whose request was acknowledged maps to the response
// it got, for the idempotency window; a key whose request is still in flight makes retries wait for it.
// After a restart of the plugin process the store is empty, so a retry then is processed again (the data
// lands twice; with a primary key that is an upsert of the same row).
type idemStore struct {
	mu      sync.Mutex
	entries map[idemKey]*idemEntry
	// expiring lists acknowledged entries in the order they were acknowledged, for sweeping.
	expiring []*idemEntry
}

type idemKey struct{ stream, key string }

type idemEntry struct {
	key         idemKey
	fingerprint [32]byte
	done        chan struct{} // closed when the request is acknowledged or has failed
	resp        []byte        // the 200 body, once acknowledged
	expires     time.Time
}

type claimResult int

const (
	claimed  claimResult = iota // the caller processes the request and must complete or release the entry
	replay                      // acknowledged before: answer with entry.resp
	inFlight                    // the first request is still running: wait for entry.done, then claim again
	mismatch                    // the key was used with another body
)

func (s *idemStore) claim(k idemKey, fp [32]byte, now time.Time) (*idemEntry, claimResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	if s.entries == nil {
		s.entries = map[idemKey]*idemEntry{}
	}
	e := s.entries[k]
	if e != nil && e.resp != nil && !now.Before(e.expires) {
		e = nil
	}
	if e == nil {
		e = &idemEntry{key: k, fingerprint: fp, done: make(chan struct{})}
		s.entries[k] = e
		return e, claimed
	}
	switch {
	case e.fingerprint != fp:
		return e, mismatch
	case e.resp != nil:
		return e, replay
	}
	return e, inFlight
}

// complete records the acknowledged response of a claimed entry and wakes the retries waiting for it.
func (s *idemStore) complete(e *idemEntry, resp []byte, window time.Duration, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.resp, e.expires = resp, now.Add(window)
	s.expiring = append(s.expiring, e)
	close(e.done)
}

// release forgets a claimed entry whose request failed, so a retry is processed afresh.
func (s *idemStore) release(e *idemEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[e.key] == e {
		delete(s.entries, e.key)
	}
	close(e.done)
}

// sweep drops expired entries. The queue is in acknowledgement order; with one window that is expiry
// order, and after the window changes an entry out of order only waits for the ones ahead of it (claim
// checks expiry itself, so a stale entry is never replayed).
func (s *idemStore) sweep(now time.Time) {
	n := 0
	for n < len(s.expiring) && !now.Before(s.expiring[n].expires) {
		e := s.expiring[n]
		if s.entries[e.key] == e {
			delete(s.entries, e.key)
		}
		n++
	}
	if n > 0 {
		s.expiring = append(s.expiring[:0], s.expiring[n:]...)
	}
}
