package supervise

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		waitLock bool
		want     fault.Class
		fixed    bool
	}{
		{"plugin config", fmt.Errorf("destination out: %w", fault.ConfigErr(errors.New("mkdir /x: permission denied"), "make /x writable")), false, fault.Config, true},
		{"plugin data", fault.DataErr(errors.New("truncate"), "re-snapshot"), false, fault.Data, true},
		{"plugin resnapshot", fault.ResnapshotErr(errors.New("slot dropped"), "re-snapshot"), false, fault.Resnapshot, true},
		{"plugin transient", fault.TransientErr(errors.New("conn reset")), false, fault.Transient, false},
		{"unclassified", errors.New("boom"), false, fault.Unknown, false},
		{"corrupt segment", fmt.Errorf("apply stopped: %w", &pipeline.EntryError{Seq: 2, Err: wal.ErrCorrupt}), false, fault.Resnapshot, true},
		{"missing commit record", fmt.Errorf("wal x: %w", wal.ErrMissing), false, fault.Resnapshot, true},
		{"destination reset", fmt.Errorf("p: %w", pipeline.ErrDestinationReset), false, fault.Resnapshot, true},
		{"log behind", pipeline.ErrLogBehind, false, fault.Config, true},
		{"guarantee", pipeline.ErrGuarantee, false, fault.Config, true},
		{"fenced", wal.ErrFenced, false, fault.Config, true},
		{"locked", wal.ErrLocked, false, fault.Config, true},
		{"locked, waiting", wal.ErrLocked, true, fault.Transient, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fix := Classify(tc.err, tc.waitLock)
			if c != tc.want || (fix != "") != tc.fixed {
				t.Fatalf("Classify = %s, fix %q; want %s (fix: %v)", c, fix, tc.want, tc.fixed)
			}
		})
	}
}

type recorder struct{ states []string }

func (r *recorder) onFault(state string, f pipeline.Fault) {
	r.states = append(r.states, fmt.Sprintf("%s:%d", state, f.Attempt))
}

func TestRun(t *testing.T) {
	transient := errors.New("connection reset")
	permanent := fault.ConfigErr(errors.New("password authentication failed"), "set the password")
	for _, tc := range []struct {
		name     string
		once     bool
		waitLock bool
		errs     []error // one per attempt; past the end, the last repeats
		progress []bool  // whether attempt i moved progress
		wantErr  bool
		attempts int
		states   []string
	}{
		{name: "permanent stops at once", once: false, errs: []error{permanent}, wantErr: true, attempts: 1, states: []string{"failed:0"}},
		{name: "transient then done", once: true, errs: []error{transient, transient, nil}, attempts: 3, states: []string{"retrying:1", "retrying:2"}},
		{name: "once gives up after the bound", once: true, errs: []error{transient}, wantErr: true, attempts: 5,
			states: []string{"retrying:1", "retrying:2", "retrying:3", "retrying:4", "failed:0"}},
		{name: "progress resets the bound", once: true, errs: []error{transient, transient, transient, transient, transient, transient, nil},
			progress: []bool{false, false, false, true, false, false}, attempts: 7},
		{name: "wait-lock waits, exit code or not", once: true, waitLock: true, errs: []error{wal.ErrLocked, wal.ErrLocked, wal.ErrLocked, wal.ErrLocked, wal.ErrLocked, wal.ErrLocked, nil},
			attempts: 7},
		{name: "locked without wait-lock fails", once: true, errs: []error{wal.ErrLocked}, wantErr: true, attempts: 1, states: []string{"failed:0"}},
		{name: "caller's permanent errors fail", errs: []error{errUsage}, wantErr: true, attempts: 1, states: []string{"failed:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			attempts := 0
			var prog uint64
			err := Run(context.Background(), Config{
				Name: "p",
				Run: func(context.Context) error {
					i := attempts
					attempts++
					if i < len(tc.progress) && tc.progress[i] {
						prog++
					}
					return tc.errs[min(i, len(tc.errs)-1)]
				},
				Once:       tc.once,
				WaitLock:   tc.waitLock,
				Progress:   func() uint64 { return prog },
				Permanent:  func(err error) bool { return errors.Is(err, errUsage) || errors.Is(err, wal.ErrLocked) },
				OnFault:    rec.onFault,
				MinBackoff: time.Millisecond,
				MaxBackoff: 2 * time.Millisecond,
			})
			if (err != nil) != tc.wantErr || attempts != tc.attempts {
				t.Fatalf("Run = %v after %d attempts; want error %v after %d", err, attempts, tc.wantErr, tc.attempts)
			}
			var f *Failed
			if err != nil && (!errors.As(err, &f) || !f.Class.Permanent() && f.Fix == "") {
				t.Fatalf("Run = %#v, want a *Failed with a class and a fix", err)
			}
			if tc.states != nil && fmt.Sprint(rec.states) != fmt.Sprint(tc.states) {
				t.Fatalf("states %v, want %v", rec.states, tc.states)
			}
		})
	}
}

var errUsage = errors.New("bad argument")
