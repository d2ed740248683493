package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/infer"
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// opField is the record field that carries the delete convention; it is never a column.
const opField = "_op"

type settings struct {
	Listen            string                  `json:"listen"`
	AddressFile       string                  `json:"address_file"`
	Streams           map[string]streamConfig `json:"streams"`
	BodyLimit         int64                   `json:"body_limit"`
	BearerToken       string                  `json:"bearer_token"` // deprecated: tokens
	Tokens            []namedToken            `json:"tokens"`
	TLS               *tlsSettings            `json:"tls"`
	IdempotencyWindow string                  `json:"idempotency_window"`
	AckTimeout        string                  `json:"ack_timeout"`
	TypeConflict      string                  `json:"type_conflict"`
	MaxBatchRows      int                     `json:"max_batch_rows"`

	idempotencyWindow time.Duration
	ackTimeout        time.Duration
	// creds are the tokens a POST may carry; none means no token is needed.
	creds []credential
	// protect is the streams' exclude_columns and hash_columns (nil: none).
	protect *protect.Set
}

type streamConfig struct {
	PrimaryKey pointers `json:"primary_key"`
	SampleFile string   `json:"sample_file"`
	// ExcludeColumns and HashColumns keep sensitive top-level fields out of everything the source emits
	// (plugin-sdk/protect says how).
	ExcludeColumns []string                `json:"exclude_columns"`
	HashColumns    map[string]protect.Hash `json:"hash_columns"`
	// keys are the key column names the pointers designate.
	keys []string
}

// pointers is one JSON pointer or a list of them.
type pointers []string

func (p *pointers) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*p = pointers{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("primary_key is a JSON pointer (\"/id\") or a list of them")
	}
	*p = many
	return nil
}

var streamName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func parseSettings(raw json.RawMessage) (_ *settings, err error) {
	defer func() {
		// Every refusal here is a setting to change; a retry would meet it again.
		if err != nil && fault.ClassOf(err) == fault.Unknown { // keep a precise fix given below
			err = fault.ConfigErr(err, "correct the connection's settings as the message says")
		}
	}()
	s := &settings{
		Listen:            "127.0.0.1:8080",
		BodyLimit:         10 << 20,
		IdempotencyWindow: "10m",
		AckTimeout:        "30s",
		TypeConflict:      "string",
		MaxBatchRows:      10000,
	}
	if err := serve.DecodeSettings(raw, s); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(s.Listen); err != nil {
		return nil, fmt.Errorf("settings: listen %q is not host:port: %w", s.Listen, err)
	}
	if s.idempotencyWindow, err = positiveDuration("idempotency_window", s.IdempotencyWindow); err != nil {
		return nil, err
	}
	if s.ackTimeout, err = positiveDuration("ack_timeout", s.AckTimeout); err != nil {
		return nil, err
	}
	switch {
	case len(s.Streams) == 0:
		return nil, errors.New("settings: streams must name at least one stream (clients POST to /v1/streams/{name})")
	case s.BodyLimit <= 0:
		return nil, fmt.Errorf("settings: body_limit must be positive, got %d", s.BodyLimit)
	case s.MaxBatchRows <= 0:
		return nil, fmt.Errorf("settings: max_batch_rows must be positive, got %d", s.MaxBatchRows)
	case s.TypeConflict != "string" && s.TypeConflict != "reject":
		return nil, fmt.Errorf("settings: type_conflict must be \"string\" or \"reject\", got %q", s.TypeConflict)
	}
	if s.creds, err = credentials(s.Tokens, s.BearerToken); err != nil {
		return nil, err
	}
	if s.TLS != nil {
		if err := s.TLS.validate(); err != nil {
			return nil, err
		}
	}
	for name, sc := range s.Streams {
		if !streamName.MatchString(name) {
			return nil, fmt.Errorf("settings: stream name %q: use letters, digits, '_', '.', '-' (at most 128, not starting with '.' or '-')", name)
		}
		keys, err := keyColumns(sc.PrimaryKey)
		if err != nil {
			return nil, fmt.Errorf("settings: streams.%s.primary_key: %w", name, err)
		}
		sc.keys = keys
		s.Streams[name] = sc
	}
	rules := map[string]protect.Table{}
	for name, sc := range s.Streams {
		rules[name] = protect.Table{ExcludeColumns: sc.ExcludeColumns, HashColumns: sc.HashColumns}
	}
	if s.protect, err = protect.Compile("streams", rules); err != nil {
		return nil, err
	}
	for _, name := range s.streamNames() {
		// Fields appear with the records, so only the key and skippr's own names can be refused up front
		// (running: a field no record has yet is not an error).
		if err := s.protect.Check(name, arrow.NewSchema(nil, nil), s.Streams[name].keys, true); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func positiveDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("settings: %s: %q is not a duration such as \"30s\" or \"10m\"", name, v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("settings: %s must be positive, got %s", name, v)
	}
	return d, nil
}

// keyColumns turns key pointers into top-level column names.
func keyColumns(ptrs []string) ([]string, error) {
	var keys []string
	for _, p := range ptrs {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("%q is not a JSON pointer (it starts with '/': \"/id\")", p)
		}
		if strings.Count(p, "/") != 1 {
			return nil, fmt.Errorf("%q: a key must be a top-level field (\"/id\"), not a nested one", p)
		}
		name := strings.NewReplacer("~1", "/", "~0", "~").Replace(p[1:])
		switch {
		case strings.HasPrefix(name, change.ReservedPrefix) || name == opField:
			return nil, fmt.Errorf("%q: %q is reserved", p, name)
		case slices.Contains(keys, name):
			return nil, fmt.Errorf("%q appears twice", p)
		}
		keys = append(keys, name)
	}
	return keys, nil
}

func (s *settings) inferOptions() infer.Options {
	if s.TypeConflict == "reject" {
		return infer.Options{Conflict: infer.Reject}
	}
	return infer.Options{Conflict: infer.WidenToString}
}

func (s *settings) streamNames() []string {
	names := make([]string, 0, len(s.Streams))
	for n := range s.Streams {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
