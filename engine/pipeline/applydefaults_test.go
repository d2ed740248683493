package pipeline_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
)

func TestResolveApply(t *testing.T) {
	unset := pipeline.ApplyKeys{MaxInterval: true, MaxBytes: true, MaxEntries: true}
	minute := &pipeline.ApplyDefaults{MaxInterval: time.Minute}
	for _, tc := range []struct {
		name      string
		lim       pipeline.ApplyLimits
		proposal  *pipeline.ApplyDefaults
		want      pipeline.ApplyLimits
		wantTaken []string
	}{
		{"unset takes the proposal", pipeline.ApplyLimits{Unset: unset}, minute,
			pipeline.ApplyLimits{MaxInterval: time.Minute, MaxBytes: pipeline.DefaultApplyMaxBytes, Unset: unset}, []string{"max_interval"}},
		{"explicit 0s stays 0", pipeline.ApplyLimits{Unset: pipeline.ApplyKeys{MaxBytes: true, MaxEntries: true}}, minute,
			pipeline.ApplyLimits{MaxBytes: pipeline.DefaultApplyMaxBytes, Unset: pipeline.ApplyKeys{MaxBytes: true, MaxEntries: true}}, nil},
		{"explicit value wins", pipeline.ApplyLimits{MaxInterval: 5 * time.Second, Unset: pipeline.ApplyKeys{MaxBytes: true, MaxEntries: true}}, minute,
			pipeline.ApplyLimits{MaxInterval: 5 * time.Second, MaxBytes: pipeline.DefaultApplyMaxBytes, Unset: pipeline.ApplyKeys{MaxBytes: true, MaxEntries: true}}, nil},
		{"proposal 0 keeps the engine default", pipeline.ApplyLimits{Unset: unset}, &pipeline.ApplyDefaults{},
			pipeline.ApplyLimits{MaxBytes: pipeline.DefaultApplyMaxBytes, Unset: unset}, nil},
		{"no proposal keeps the engine default", pipeline.ApplyLimits{MaxBytes: 1 << 20, Unset: unset}, nil,
			pipeline.ApplyLimits{MaxBytes: 1 << 20, Unset: unset}, nil},
		{"a negative proposal is none", pipeline.ApplyLimits{Unset: unset}, &pipeline.ApplyDefaults{MaxInterval: -time.Millisecond, MaxBytes: -1, MaxEntries: -1},
			pipeline.ApplyLimits{MaxBytes: pipeline.DefaultApplyMaxBytes, Unset: unset}, nil},
		{"all three proposed", pipeline.ApplyLimits{Unset: unset}, &pipeline.ApplyDefaults{MaxInterval: 1500 * time.Millisecond, MaxBytes: 1 << 30, MaxEntries: 7},
			pipeline.ApplyLimits{MaxInterval: 1500 * time.Millisecond, MaxBytes: 1 << 30, MaxEntries: 7, Unset: unset}, []string{"max_interval", "max_bytes", "max_entries"}},
		{"each key on its own", pipeline.ApplyLimits{MaxBytes: 64 << 20, Unset: pipeline.ApplyKeys{MaxInterval: true, MaxEntries: true}}, &pipeline.ApplyDefaults{MaxInterval: time.Second, MaxBytes: 1 << 30},
			pipeline.ApplyLimits{MaxInterval: time.Second, MaxBytes: 64 << 20, Unset: pipeline.ApplyKeys{MaxInterval: true, MaxEntries: true}}, []string{"max_interval"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, taken := pipeline.ResolveApply(tc.lim, tc.proposal)
			if got != tc.want || !reflect.DeepEqual(taken, tc.wantTaken) {
				t.Errorf("resolve = %+v, %q; want %+v, %q", got, taken, tc.want, tc.wantTaken)
			}
		})
	}
}
