// Package protect keeps columns a user marked as sensitive out of everything a source emits: an excluded column
// is removed, a hashed column is replaced by a keyed hash of its value. A source applies it to its streams
// (Discover and SchemaChange) and to every batch, so the clear value never leaves the source plugin: not into
// the engine's WAL, a destination, a checkpoint, a log line or an error message.
//
// The contract:
//
//   - Rules are per stream: ExcludeColumns lists columns to remove, HashColumns maps a column to its salt.
//     A column is in at most one of them; a salt is never empty. Compile refuses anything else, and Check
//     refuses, per stream schema, a rule naming a key column (key values travel in checkpoints and identify rows
//     in destinations: choose other key columns instead) or, when a pipeline starts, a column the stream does
//     not have.
//   - An excluded column disappears from the stream's Arrow schema and from every batch.
//   - A hashed column becomes a utf8 column of the same name and nullability holding the lowercase hex of
//     HMAC-SHA256(salt, canonical(value)): 64 characters, whatever the source type, so every destination can
//     hold it and equal values still join. A null stays null. canonical is the value's bytes for utf8 and binary
//     types, its decimal text for integers (so int32 42, int64 42 and the text "42" hash alike), strconv's
//     shortest 'g' form for floats, "true"/"false" for booleans, RFC 3339 with nanoseconds in UTC for
//     timestamps (2026-01-02T03:04:05.123456Z), and arrow-go's ValueStr for every other type. The hashed
//     field's metadata is replaced by MetaHashed, since what it described (a source type, a default value)
//     belongs to the clear column.
//   - Every row is transformed alike, whatever its op: snapshot reads, inserts, the new values of updates, the
//     key-only rows of deletes. Entries of the _skippr_meta column (plugin-sdk/values) that name a protected
//     column are dropped, since they hold its value.
//   - A salt appears in no error, log line or checkpoint; a checkpoint records only a fingerprint of each
//     stream's rules (Wrap, Resume), so a pipeline whose rules changed is refused until the stream is copied
//     again (re-snapshot): mixing hashes of two salts, or rows with and without a column, in one destination
//     table would be silently wrong. A stream's row filter (Table.Where, applied by the source) is part of the
//     fingerprint for the same reason: the destination holds the rows the old filter chose.
package protect

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// MetaHashed is the field metadata key of a hashed column; its value is the algorithm, "hmac-sha256-hex".
const MetaHashed = "skippr.protect"

// Algorithm is MetaHashed's value.
const Algorithm = "hmac-sha256-hex"

// Table is one stream's rules as a source's settings hold them (table_options.<table>).
type Table struct {
	ExcludeColumns []string        `json:"exclude_columns"`
	HashColumns    map[string]Hash `json:"hash_columns"`
	// Where is the stream's row filter (table_options.<table>.where), which the source applies itself. It
	// changes nothing here but the fingerprint: rows already sent were chosen by the filter a checkpoint
	// recorded, so a changed filter is refused like changed rules until the stream is copied again.
	Where string `json:"where"`
}

// Hash is one hashed column's settings. Salt comes from the environment (${EMAIL_SALT}) so it is not in the
// config file; it is never echoed.
type Hash struct {
	Salt string `json:"salt"`
}

// Empty says the table protects nothing.
func (t Table) Empty() bool {
	return len(t.ExcludeColumns) == 0 && len(t.HashColumns) == 0 && strings.TrimSpace(t.Where) == ""
}

// Set is the compiled rules of a source's streams. A nil *Set protects nothing.
type Set struct {
	streams map[string]*rules // by stream name
}

type rules struct {
	exclude map[string]bool
	hash    map[string][]byte // column → salt
	where   string            // the row filter, trimmed; only in the fingerprint
	fp      string
}

// columnless says the rules protect no column (a row filter only): batches and schemas pass unchanged.
func (r *rules) columnless() bool { return len(r.exclude) == 0 && len(r.hash) == 0 }

// Compile checks the rules of each stream (by stream name) and returns them ready to apply; nil when no stream
// has any. setting names the settings key in errors, e.g. "table_options".
func Compile(setting string, tables map[string]Table) (*Set, error) {
	s := &Set{streams: map[string]*rules{}}
	var problems []string
	names := make([]string, 0, len(tables))
	for n := range tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t := tables[name]
		if t.Empty() {
			continue
		}
		r := &rules{exclude: map[string]bool{}, hash: map[string][]byte{}, where: strings.TrimSpace(t.Where)}
		for _, c := range t.ExcludeColumns {
			if c == "" {
				problems = append(problems, fmt.Sprintf("%s.%s.exclude_columns has an empty column name", setting, name))
				continue
			}
			if r.exclude[c] {
				problems = append(problems, fmt.Sprintf("%s.%s.exclude_columns lists %s twice", setting, name, c))
			}
			r.exclude[c] = true
		}
		for c, h := range t.HashColumns {
			switch {
			case c == "":
				problems = append(problems, fmt.Sprintf("%s.%s.hash_columns has an empty column name", setting, name))
			case r.exclude[c]:
				problems = append(problems, fmt.Sprintf("%s.%s: column %s is both excluded and hashed; choose one", setting, name, c))
			case h.Salt == "":
				problems = append(problems, fmt.Sprintf("%s.%s.hash_columns.%s.salt is empty: set it to a secret from the environment, e.g. salt: ${%s_SALT}", setting, name, c, strings.ToUpper(c)))
			default:
				r.hash[c] = []byte(h.Salt)
			}
		}
		r.fp = r.fingerprint()
		s.streams[name] = r
	}
	if len(problems) > 0 {
		return nil, fault.ConfigErr(fmt.Errorf("settings: %s", strings.Join(problems, "; ")),
			"correct the exclude_columns and hash_columns settings the message names")
	}
	if len(s.streams) == 0 {
		return nil, nil
	}
	return s, nil
}

// fingerprint identifies the rules without revealing a salt: the salt enters only as an HMAC of a constant.
func (r *rules) fingerprint() string {
	var parts []string
	for c := range r.exclude {
		parts = append(parts, "x:"+c)
	}
	for c, salt := range r.hash {
		m := hmac.New(sha256.New, salt)
		m.Write([]byte("skippr.protect.fingerprint"))
		parts = append(parts, "h:"+c+":"+hex.EncodeToString(m.Sum(nil)))
	}
	if r.where != "" {
		// Only when set, so the fingerprints of rules without a filter stay what checkpoints hold.
		parts = append(parts, "w:"+r.where)
	}
	sort.Strings(parts)
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(sum[:12])
}

// Protects says whether the stream has rules.
func (s *Set) Protects(stream string) bool { return s != nil && s.streams[stream] != nil }

// Check refuses rules that do not fit a stream: a key column, or a column the schema lacks unless running (the
// pipeline has a checkpoint: the column may have been dropped since it started, which leaves the rule nothing to
// do, and refusing would leave the user only a re-snapshot to get going again). Call it at start for every
// stream, before anything is emitted; the error is a config fault naming stream and column.
func (s *Set) Check(stream string, schema *arrow.Schema, key []string, running bool) error {
	r := s.rule(stream)
	if r == nil {
		return nil
	}
	var problems []string
	for _, c := range r.columns() {
		what := "excluded"
		if r.hash[c] != nil {
			what = "hashed"
		}
		switch {
		case change.Reserved(c) || c == change.MetaColumn:
			problems = append(problems, fmt.Sprintf("table %s: %s is skippr's own column, not one of the table's (%s)", stream, c, what))
		case len(schema.FieldIndices(c)) == 0 && !running:
			problems = append(problems, fmt.Sprintf("table %s has no column %s (%s)", stream, c, what))
		case slices.Contains(key, c):
			problems = append(problems, fmt.Sprintf("table %s: key column %s cannot be %s (key values travel in checkpoints and identify rows downstream); set key_columns to other columns, or protect another column", stream, c, what))
		}
	}
	if len(problems) > 0 {
		return fault.ConfigErr(fmt.Errorf("refused at start: %s", strings.Join(problems, "; ")),
			"correct exclude_columns / hash_columns (the column names are the source table's)")
	}
	return nil
}

// Hides says whether a column of a stream is excluded or hashed: its values must appear in no message
// (values.Handler.Hide takes it).
func (s *Set) Hides(stream, column string) bool {
	r := s.rule(stream)
	return r != nil && (r.exclude[column] || r.hash[column] != nil)
}

// Excluded lists a stream's excluded columns, sorted: a source that can leave them out before it even looks at
// their values (the http source, before inferring types) does.
func (s *Set) Excluded(stream string) []string {
	r := s.rule(stream)
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.exclude))
	for c := range r.exclude {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func (s *Set) rule(stream string) *rules {
	if s == nil {
		return nil
	}
	return s.streams[stream]
}

func (r *rules) columns() []string {
	var out []string
	for c := range r.exclude {
		out = append(out, c)
	}
	for c := range r.hash {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Schema returns the schema the stream has downstream: excluded fields removed, hashed ones utf8.
func (s *Set) Schema(stream string, schema *arrow.Schema) *arrow.Schema {
	r := s.rule(stream)
	if r == nil || r.columnless() {
		return schema
	}
	fields := make([]arrow.Field, 0, schema.NumFields())
	for _, f := range schema.Fields() {
		switch {
		case r.exclude[f.Name]:
			continue
		case r.hash[f.Name] != nil:
			md := arrow.NewMetadata([]string{MetaHashed}, []string{Algorithm})
			f = arrow.Field{Name: f.Name, Type: arrow.BinaryTypes.String, Nullable: f.Nullable, Metadata: md}
		}
		fields = append(fields, f)
	}
	md := schema.Metadata()
	return arrow.NewSchema(fields, &md)
}

// Record returns rec as the stream has it downstream. The caller releases the result (rec itself when the
// stream has no rules, retained once more).
func (s *Set) Record(mem memory.Allocator, stream string, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	r := s.rule(stream)
	if r == nil || r.columnless() {
		rec.Retain()
		return rec, nil
	}
	schema := rec.Schema()
	out := s.Schema(stream, schema)
	cols := make([]arrow.Array, 0, out.NumFields())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	for i, f := range schema.Fields() {
		var col arrow.Array
		switch {
		case r.exclude[f.Name]:
			continue
		case r.hash[f.Name] != nil:
			c, err := hashColumn(mem, r.hash[f.Name], rec.Column(i))
			if err != nil {
				// The error names stream, column and type; never a value or the salt.
				return nil, fault.DataErr(fmt.Errorf("stream %s column %s: %w", stream, f.Name, err),
					"exclude the column instead of hashing it")
			}
			col = c
		case f.Name == change.MetaColumn:
			c, err := scrubMeta(mem, r, rec.Column(i))
			if err != nil {
				return nil, fmt.Errorf("stream %s column %s: %w", stream, f.Name, err)
			}
			col = c
		default:
			col = rec.Column(i)
			col.Retain()
		}
		cols = append(cols, col)
	}
	return array.NewRecordBatch(out, cols, rec.NumRows()), nil
}

// Digest is the hashed form of one value's canonical bytes: what a hashed column holds.
func Digest(salt, canonical []byte) string {
	m := hmac.New(sha256.New, salt)
	m.Write(canonical)
	return hex.EncodeToString(m.Sum(nil))
}

func hashColumn(mem memory.Allocator, salt []byte, col arrow.Array) (arrow.Array, error) {
	b := array.NewStringBuilder(mem)
	defer b.Release()
	b.Reserve(col.Len())
	m := hmac.New(sha256.New, salt)
	var (
		buf []byte
		sum [sha256.Size]byte
		dst [2 * sha256.Size]byte
	)
	canon, err := canonicalizer(col)
	if err != nil {
		return nil, err
	}
	for i := range col.Len() {
		if col.IsNull(i) {
			b.AppendNull()
			continue
		}
		buf = canon(buf[:0], i)
		b.Append(digest(m, buf, sum[:0], dst[:]))
	}
	return b.NewArray(), nil
}

func digest(m hash.Hash, v, sum, dst []byte) string {
	m.Reset()
	m.Write(v)
	hex.Encode(dst, m.Sum(sum))
	return string(dst)
}

// canonicalizer returns the function appending value i's canonical bytes (see the package doc).
func canonicalizer(col arrow.Array) (func(buf []byte, i int) []byte, error) {
	switch a := col.(type) {
	case *array.String:
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i)...) }, nil
	case *array.LargeString:
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i)...) }, nil
	case *array.Binary:
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i)...) }, nil
	case *array.LargeBinary:
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i)...) }, nil
	case *array.FixedSizeBinary:
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i)...) }, nil
	case *array.Int8:
		return func(buf []byte, i int) []byte { return strconv.AppendInt(buf, int64(a.Value(i)), 10) }, nil
	case *array.Int16:
		return func(buf []byte, i int) []byte { return strconv.AppendInt(buf, int64(a.Value(i)), 10) }, nil
	case *array.Int32:
		return func(buf []byte, i int) []byte { return strconv.AppendInt(buf, int64(a.Value(i)), 10) }, nil
	case *array.Int64:
		return func(buf []byte, i int) []byte { return strconv.AppendInt(buf, a.Value(i), 10) }, nil
	case *array.Uint8:
		return func(buf []byte, i int) []byte { return strconv.AppendUint(buf, uint64(a.Value(i)), 10) }, nil
	case *array.Uint16:
		return func(buf []byte, i int) []byte { return strconv.AppendUint(buf, uint64(a.Value(i)), 10) }, nil
	case *array.Uint32:
		return func(buf []byte, i int) []byte { return strconv.AppendUint(buf, uint64(a.Value(i)), 10) }, nil
	case *array.Uint64:
		return func(buf []byte, i int) []byte { return strconv.AppendUint(buf, a.Value(i), 10) }, nil
	case *array.Float32:
		return func(buf []byte, i int) []byte { return strconv.AppendFloat(buf, float64(a.Value(i)), 'g', -1, 32) }, nil
	case *array.Float64:
		return func(buf []byte, i int) []byte { return strconv.AppendFloat(buf, a.Value(i), 'g', -1, 64) }, nil
	case *array.Boolean:
		return func(buf []byte, i int) []byte { return strconv.AppendBool(buf, a.Value(i)) }, nil
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		return func(buf []byte, i int) []byte {
			return a.Value(i).ToTime(unit).UTC().AppendFormat(buf, time.RFC3339Nano)
		}, nil
	}
	if col.DataType().ID() == arrow.EXTENSION || col.DataType().ID() == arrow.DICTIONARY {
		return nil, fmt.Errorf("type %s cannot be hashed", col.DataType())
	}
	return func(buf []byte, i int) []byte { return append(buf, col.ValueStr(i)...) }, nil
}

// scrubMeta drops the _skippr_meta entries of protected columns: they hold the value in its source text form.
func scrubMeta(mem memory.Allocator, r *rules, col arrow.Array) (arrow.Array, error) {
	a, ok := col.(*array.String)
	if !ok {
		return nil, fmt.Errorf("is %s, want utf8", col.DataType())
	}
	b := array.NewStringBuilder(mem)
	defer b.Release()
	for i := range a.Len() {
		if a.IsNull(i) {
			b.AppendNull()
			continue
		}
		var m values.Meta
		if err := json.Unmarshal([]byte(a.Value(i)), &m); err != nil {
			return nil, fmt.Errorf("row %d is not JSON: %w", i, err)
		}
		kept := m.Changes[:0]
		for _, c := range m.Changes {
			if !r.exclude[c.Column] && r.hash[c.Column] == nil {
				kept = append(kept, c)
			}
		}
		if len(kept) == 0 {
			b.AppendNull()
			continue
		}
		m.Changes = kept
		out, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		b.Append(string(out))
	}
	return b.NewArray(), nil
}
