package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// Reading is a source's running Read for a plugin's own tests, its messages gathered by a goroutine so a test
// can wait for the next checkpoint with a timeout. It stops when the test ends.
type Reading struct {
	t      testing.TB
	cancel context.CancelFunc
	msgs   chan client.Message
	err    chan error
	done   chan struct{}
}

// StartReading starts a Read of every stream from checkpoint from (nil: the beginning).
func StartReading(t testing.TB, c *client.Client, settings, from []byte) *Reading {
	t.Helper()
	return StartReadingFor(t, c, "", settings, from)
}

// StartReadingFor is StartReading on behalf of the named pipeline (ReadRequest.pipeline).
func StartReadingFor(t testing.TB, c *client.Client, pipeline string, settings, from []byte) *Reading {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs, err := c.ReadFor(ctx, pipeline, settings, nil, from, nil)
	if err != nil {
		cancel()
		t.Fatalf("read: %v", err)
	}
	r := &Reading{t: t, cancel: cancel, msgs: make(chan client.Message, 64), err: make(chan error, 1), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			m, err := rs.Next()
			if err != nil {
				r.err <- err
				return
			}
			select {
			case r.msgs <- m:
			case <-ctx.Done():
				r.err <- ctx.Err()
				return
			}
		}
	}()
	t.Cleanup(r.Stop)
	return r
}

// Stop ends the Read and waits for its goroutine.
func (r *Reading) Stop() {
	r.cancel()
	<-r.done
}

// Chunk is what a source emitted up to and including one checkpoint, as the engine would apply it.
type Chunk struct {
	Items      []client.ApplyItem
	Rows       int64 // rows in the batches
	Checkpoint *pluginv2.Checkpoint
}

// Next returns everything up to the next checkpoint. The Read's error, once seen, is kept for the next call.
func (r *Reading) Next(timeout time.Duration) (Chunk, error) {
	var c Chunk
	deadline := time.After(timeout)
	for {
		select {
		case m := <-r.msgs:
			switch {
			case m.Batch != nil:
				b := *m.Batch
				c.Items = append(c.Items, client.ApplyItem{Batch: &b})
				c.Rows += b.Rows
			case m.Schema != nil:
				c.Items = append(c.Items, client.ApplyItem{Schema: m.Schema})
			case m.Truncate != "":
				c.Items = append(c.Items, client.ApplyItem{Truncate: m.Truncate})
			case m.Checkpoint != nil:
				c.Checkpoint = m.Checkpoint
				return c, nil
			}
		case err := <-r.err:
			r.err <- err
			return c, err
		case <-deadline:
			return c, fmt.Errorf("no checkpoint within %s (%d items pending)", timeout, len(c.Items))
		}
	}
}

// MustNext is Next that fails the test.
func (r *Reading) MustNext(timeout time.Duration) Chunk {
	r.t.Helper()
	c, err := r.Next(timeout)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return c
}

// Err waits for the Read to fail and returns its error; a Read that ends cleanly is an error too, since a
// source's Read runs until it is cancelled.
func (r *Reading) Err(timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case <-r.msgs:
		case err := <-r.err:
			r.err <- err
			if errors.Is(err, io.EOF) {
				return errors.New("read ended without an error")
			}
			return err
		case <-deadline:
			return fmt.Errorf("read did not fail within %s", timeout)
		}
	}
}

// Messages is the Read's messages one by one, for a test that looks inside a checkpoint's content as it
// arrives (batch sizes of a large transaction). Do not mix with Next.
func (r *Reading) Messages() <-chan client.Message { return r.msgs }

// Errors yields the Read's error once it has failed or ended.
func (r *Reading) Errors() <-chan error { return r.err }
