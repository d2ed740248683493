// Package values decides what a source does with a legal source value that its Arrow type cannot hold: NaN
// or ±Infinity in a numeric(p,s) carried as decimal128, a year past timestamp[us]'s range in a timestamp.
// Decoders report such a value as an *Unrepresentable error; the source hands
// it to a Handler, which applies the pipeline's on_unrepresentable setting:
//
//	fail             the source stops with a fault.DataErr naming the table, column, key and value, and the
//	                 setting that gets past it; nothing of the batch is written
//	null_and_record  the value is written as NULL and the row's _skippr_meta column records what was changed,
//	                 as JSON: {"changes":[{"column":"price","reason":"...","value":"NaN"}]} (in the manner of
//	                 Airbyte's _airbyte_meta.changes); each column's replacements are counted and logged at
//	                 most once a minute
//
// The default is fail. A CDC pipeline's promise is that the destination holds what the source holds; writing
// NULL instead of a value is a loss a person should choose knowingly, with the value named in front of them,
// not discover later in a report. Since errors of class Data stop the pipeline in state failed (no restart
// loop), fail costs a stop with a message, never a silent wedge. It also keeps every destination table free of
// a column that most pipelines would never fill.
//
// The _skippr_meta column is part of every stream's schema exactly when the policy is null_and_record, from
// the first batch of the snapshot on, and it is NULL in rows where nothing was changed: its presence depends
// on the setting, never on the data, so a value arriving mid-stream changes no schema. Turning the setting on
// later adds the column through the destination's ordinary schema evolution; turning it off keeps the column
// in the destination, NULL in new rows. Key columns never take the replacement: a row without its key cannot
// be applied, so an unrepresentable key value fails under either policy.
//
// ±infinity in a date or a timestamp is a value, not a loss: it travels as DuckDB keeps it, the largest value
// of date32 or timestamp[us] for infinity and its negation for -infinity (TimestampInfinity and the others
// below). A PostgreSQL destination writes them back as 'infinity' and '-infinity', and DuckDB (skippr query,
// the DuckDB destination) reads them as its own infinities from Iceberg's Parquet files. No finite PostgreSQL
// date comes near either end of date32, nor a finite timestamp near -MaxInt64 microseconds; the one finite
// timestamp that equals TimestampInfinity (294247-01-10 04:00:54.775807 UTC, the last microsecond of
// timestamp[us]) is reported as Unrepresentable, so no real value is ever read back as infinity.
//
// The column travels with the _skippr_ prefix of the change protocol's columns but is data: change.DataFields
// and change.StripReserved keep it, so destinations write it like any other column.
package values

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// How ±infinity travels in date32 and timestamp[us] columns (the package doc says why these values).
const (
	TimestampInfinity    = arrow.Timestamp(math.MaxInt64)
	TimestampNegInfinity = arrow.Timestamp(-math.MaxInt64)
	DateInfinity         = arrow.Date32(math.MaxInt32)
	DateNegInfinity      = arrow.Date32(-math.MaxInt32)
)

// Policy is the on_unrepresentable setting.
type Policy string

// The policies; Default is the one an unset setting means (the package doc says why).
const (
	Fail          Policy = "fail"
	NullAndRecord Policy = "null_and_record"
	Default              = Fail
)

// MetaExistingRows is field metadata: the value, in the source's text form, that rows which existed before the
// column was added hold without any change saying so (PostgreSQL's ADD COLUMN … DEFAULT x fills them in its
// catalog, and logical decoding sends only the new column). A destination that adds the column gives its
// existing rows this value, or says in its schema-change log line that it cannot.
const MetaExistingRows = "skippr.existing_rows_value"

// Setting is the settings key sources use for the policy.
const Setting = "on_unrepresentable"

// ParsePolicy reads the setting; "" is Default.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "":
		return Default, nil
	case Fail, NullAndRecord:
		return Policy(s), nil
	}
	return "", fmt.Errorf("%s %q is not one of %s, %s", Setting, s, Fail, NullAndRecord)
}

// Field is the _skippr_meta column as sources declare it, after the data columns.
var Field = arrow.Field{Name: change.MetaColumn, Type: arrow.BinaryTypes.String, Nullable: true}

// Fields returns fields with Field appended when the policy records changes: the one place that decides
// whether a stream's schema has the column.
func (p Policy) Fields(fields []arrow.Field) []arrow.Field {
	if p != NullAndRecord {
		return fields
	}
	return append(append([]arrow.Field{}, fields...), Field)
}

// Unrepresentable is a legal source value the column's Arrow type cannot hold.
type Unrepresentable struct {
	Value  string // the value in the source's text form
	Reason string // why it cannot be carried, e.g. "numeric NaN has no decimal128(10,2) value"
	// Appended is set when the decoder has already appended a value with NULL in place of the unrepresentable
	// part (an array element), so the caller must not append NULL for the whole value.
	Appended bool
}

func (e *Unrepresentable) Error() string { return fmt.Sprintf("value %s: %s", e.Value, e.Reason) }

// Unrepresentablef builds an *Unrepresentable error.
func Unrepresentablef(value, format string, args ...any) error {
	return &Unrepresentable{Value: value, Reason: fmt.Sprintf(format, args...)}
}

// Change is one entry of _skippr_meta.changes.
type Change struct {
	Column string `json:"column"`
	Reason string `json:"reason"`
	Value  string `json:"value"`
}

// Meta is the JSON object in _skippr_meta.
type Meta struct {
	Changes []Change `json:"changes"`
}

// Row gathers the changes made to one row. The zero value is ready; Reset it between rows.
type Row struct{ changes []Change }

// Reset forgets the row's changes.
func (r *Row) Reset() { r.changes = r.changes[:0] }

// Changed says whether anything was replaced in the row.
func (r *Row) Changed() bool { return len(r.changes) > 0 }

// JSON is the row's _skippr_meta value; call it only when Changed.
func (r *Row) JSON() string {
	b, err := json.Marshal(Meta{Changes: r.changes})
	if err != nil { // strings only: cannot happen
		panic(err)
	}
	return string(b)
}

// Handler applies a policy for one source. Safe for concurrent use (the snapshot copies tables in parallel).
type Handler struct {
	policy Policy
	log    *slog.Logger
	every  time.Duration
	now    func() time.Time

	// hidden says a column's values must not appear in a message (plugin-sdk/protect's excluded and hashed
	// columns); nil: none.
	hidden func(table, column string) bool

	mu     sync.Mutex
	counts map[string]*counter // by "table.column"
}

// Hide makes the handler leave the values of the columns hidden names out of its errors: a source with
// protected columns (plugin-sdk/protect, Set.Hides) sets it before reading. The _skippr_meta entries of those
// columns are protect's to drop.
func (h *Handler) Hide(hidden func(table, column string) bool) { h.hidden = hidden }

type counter struct {
	total, unlogged int64
	logged          time.Time
}

// NewHandler returns a handler for policy, logging replacements to log.
func NewHandler(policy Policy, log *slog.Logger) *Handler {
	return &Handler{policy: policy, log: log, every: time.Minute, now: time.Now, counts: map[string]*counter{}}
}

// Policy is the handler's policy.
func (h *Handler) Policy() Policy { return h.policy }

// Where names the value a decoder failed on, for the messages.
type Where struct {
	Table, Column string
	// Key renders the row's key (col=value, ...); called only when a message needs it.
	Key   func() string
	IsKey bool // the column is part of the key
}

// Handle decides about a decoder's error. It returns err itself when err is not an *Unrepresentable (worded
// without the value for a column Hide names), a
// fault.DataErr under fail (or for a key column), and nil when the value is to be written as NULL, having
// recorded the change in row; the caller then appends NULL unless the error says Appended.
func (h *Handler) Handle(w Where, err error, row *Row) error {
	var u *Unrepresentable
	if !errors.As(err, &u) {
		if h.hidden != nil && h.hidden(w.Table, w.Column) {
			// A decoder's error may quote the value: keep its class, not its text.
			return fault.New(fault.ClassOf(err), fmt.Errorf("table %s, column %s: a value does not decode as the column's type (not shown: the column is excluded or hashed)", w.Table, w.Column), fault.FixOf(err))
		}
		return err
	}
	key := "(no key)"
	if w.Key != nil {
		key = w.Key()
	}
	what := fmt.Errorf("table %s, column %s, key %s: %w", w.Table, w.Column, key, u)
	if h.hidden != nil && h.hidden(w.Table, w.Column) {
		what = fmt.Errorf("table %s, column %s, key %s: a value this type cannot hold (not shown: the column is excluded or hashed)", w.Table, w.Column, key)
	}
	if w.IsKey {
		return fault.DataErr(what, "a key value cannot be replaced by NULL: change the value in the source, or key the table on columns whose values the destination can hold")
	}
	if h.policy != NullAndRecord {
		return fault.DataErr(what, fmt.Sprintf("set %s: %s in the source's settings to write NULL and record the value in the %s column, or change the value in the source", Setting, NullAndRecord, change.MetaColumn))
	}
	row.changes = append(row.changes, Change{Column: w.Column, Reason: u.Reason, Value: u.Value})
	h.count(w.Table + "." + w.Column)
	return nil
}

func (h *Handler) count(col string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.counts[col]
	if c == nil {
		c = &counter{}
		h.counts[col] = c
	}
	c.total++
	c.unlogged++
	if now := h.now(); now.Sub(c.logged) >= h.every {
		h.log.Warn("unrepresentable values written as NULL and recorded in "+change.MetaColumn,
			"column", col, "since_last_log", c.unlogged, "total", c.total, "policy", string(h.policy))
		c.logged, c.unlogged = now, 0
	}
}

// Counts returns how many values each column ("table.column") has had replaced since the handler started.
func (h *Handler) Counts() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int64, len(h.counts))
	for k, c := range h.counts {
		out[k] = c.total
	}
	return out
}

// KeyText renders key columns and their values as "a=1, b=x" for messages.
func KeyText(names []string, vals []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		v := "NULL"
		if i < len(vals) {
			v = vals[i]
		}
		parts[i] = n + "=" + v
	}
	if len(parts) == 0 {
		return "(no key)"
	}
	return strings.Join(parts, ", ")
}
