package run

import (
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/engine/config"
)

// FleetPipelines refuses every local-disk WAL that is not pinned, naming each at its place in the config.
func TestFleetPipelines(t *testing.T) {
	pipe := func(name, url, pin string) *config.Pipeline {
		p := &config.Pipeline{Name: name, Fleet: config.FleetConfig{Pin: pin}}
		p.WAL.URL, p.WAL.Pos = url, config.Pos{File: "skippr.yml", Line: len(name)}
		return p
	}
	for _, tc := range []struct {
		name    string
		pipes   []*config.Pipeline
		want    int      // pipelines returned
		refused []string // in the error
	}{
		{"s3 and pinned", []*config.Pipeline{pipe("a", "s3://b/a", ""), pipe("bb", "file:///w", "w1")}, 2, nil},
		{"two local", []*config.Pipeline{pipe("a", "file:///a", ""), pipe("bb", "file:///b", ""), pipe("c", "s3://b/c", "")}, 0,
			[]string{"skippr.yml:1: pipeline a: its WAL is on local disk", "skippr.yml:2: pipeline bb: its WAL is on local disk"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fps, err := FleetPipelines(tc.pipes)
			if len(tc.refused) == 0 {
				if err != nil || len(fps) != tc.want || fps[1].Pin != "w1" {
					t.Fatalf("FleetPipelines: %v, %+v", err, fps)
				}
				return
			}
			if err == nil || CodeOf(err) != Refused {
				t.Fatalf("err %v (code %v), want Refused", err, CodeOf(err))
			}
			for _, r := range tc.refused {
				if !strings.Contains(err.Error(), r) {
					t.Fatalf("err %q does not say %q", err, r)
				}
			}
		})
	}
}
