// Package resnapshot holds the `skippr resnapshot` requests of one pipeline on disk, beside its status file, where
// a running `skippr sync` polls for them.
//
// A request is one file per stream, DIR/<escaped stream>.json, written to a temporary name and renamed, so a
// reader sees a whole request or none. Asking again for a stream already requested keeps the file (idempotent).
// A running sync passes the pending streams to the source's Read; once a source checkpoint that carries them is
// durable in the WAL, the source owns the re-snapshot (it resumes it after a SIGKILL from its checkpoint) and the
// sync removes the files — only those it read, not one written again since (the ID says which).
package resnapshot

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/skippr-dev/skippr/internal/suggest"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// Request asks for one stream to be copied again.
type Request struct {
	Stream    string    `json:"stream"`
	ID        string    `json:"id"`
	Requested time.Time `json:"requested"`
}

// Store is the request directory of one pipeline.
type Store struct{ Dir string }

const suffix = ".json"

func (s Store) path(stream string) string {
	return filepath.Join(s.Dir, url.PathEscape(stream)+suffix)
}

// Add records a request for each stream and returns them; a stream already pending keeps its request.
func (s Store) Add(streams []string) ([]Request, error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("resnapshot requests: %w", err)
	}
	var out []Request
	for _, st := range streams {
		if st == "" {
			return out, errors.New("resnapshot: empty stream name")
		}
		if r, err := s.read(s.path(st)); err == nil {
			out = append(out, r)
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return out, err
		}
		id := make([]byte, 8)
		_, _ = rand.Read(id)
		r := Request{Stream: st, ID: hex.EncodeToString(id), Requested: time.Now().UTC()}
		b, _ := json.Marshal(r)
		tmp := s.path(st) + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return out, fmt.Errorf("resnapshot request %s: %w", st, err)
		}
		if err := syncRename(tmp, s.path(st)); err != nil {
			return out, fmt.Errorf("resnapshot request %s: %w", st, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// syncRename renames tmp over path and makes both durable: a request acknowledged to the user survives a crash.
func syncRename(tmp, path string) error {
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (s Store) read(path string) (Request, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Request{}, err
	}
	var r Request
	if err := json.Unmarshal(b, &r); err != nil || r.Stream == "" {
		return Request{}, fmt.Errorf("resnapshot request %s is damaged (%v): delete it and ask again", path, err)
	}
	return r, nil
}

// Pending lists the requests, oldest first.
func (s Store) Pending() ([]Request, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resnapshot requests: %w", err)
	}
	var out []Request
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		r, err := s.read(filepath.Join(s.Dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Requested.Equal(out[j].Requested) {
			return out[i].Requested.Before(out[j].Requested)
		}
		return out[i].Stream < out[j].Stream
	})
	return out, nil
}

// Done removes the requests that are still the ones given (same ID).
func (s Store) Done(reqs []Request) error {
	for _, r := range reqs {
		cur, err := s.read(s.path(r.Stream))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if cur.ID != r.ID {
			continue
		}
		if err := os.Remove(s.path(r.Stream)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("resnapshot request %s: %w", r.Stream, err)
		}
	}
	return nil
}

// ErrRefused is a request that cannot be carried out as asked: a source that cannot re-snapshot, a
// destination that cannot apply one, or an unknown stream.
var ErrRefused = errors.New("resnapshot refused")

// Check refuses, before anything is recorded: a source that cannot re-snapshot (source names it, "" when it
// can), destinations without the capability (lacking names them), and streams the source does not offer
// (naming the closest one).
func Check(streams, offered []string, source string, lacking []string) error {
	var why, fix []string
	if source != "" {
		why = append(why, fmt.Sprintf("source %s cannot re-snapshot a table (its plugin offers no %s service)", source, protocol.ServiceResnapshot))
	}
	if len(lacking) > 0 {
		why = append(why, fmt.Sprintf("destination %s cannot apply a re-snapshot: it could not remove the rows the source no longer has", strings.Join(lacking, ", ")))
		fix = append(fix, "take it out of the pipeline for the re-snapshot")
	}
	if len(why) > 0 {
		fix = append(fix, "re-create the pipeline under a new name to copy everything again")
		return fmt.Errorf("%s; %s: %w", strings.Join(why, "; "), strings.Join(fix, ", or "), ErrRefused)
	}
	for _, s := range streams {
		if slices.Contains(offered, s) {
			continue
		}
		msg := fmt.Sprintf("the source offers no stream %q", s)
		if m := suggest.Closest(s, offered); m != "" {
			msg += fmt.Sprintf("; did you mean %q?", m)
		}
		return fmt.Errorf("%s (offered: %s); add the table to the source's tables first (a newly added table is copied on its own): %w", msg, strings.Join(offered, ", "), ErrRefused)
	}
	return nil
}
