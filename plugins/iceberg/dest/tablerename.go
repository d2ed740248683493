package dest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/util"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// A renamed stream (RENAME TABLE a TO b at the source) arrives as stream b whose schema carries
// change.RenamedFromTableMeta = a. On b's first item of an apply the destination looks at the catalog: when b's
// table does not exist and a's does, it renames a's table to b's (the catalog's RenameTable: metadata only, the
// table keeps its location, so its files stay under a's path), the history table first; a's items buffered
// earlier in the same apply (the rows a held before the rename) go to b's table, whose commit records the fence
// as always. When b's table exists already (a replay after the rename) nothing is renamed; when neither exists,
// b's table is created as usual. A table keeps its snapshot properties (the per-pipeline fence) and its
// re-snapshot bookkeeping through the rename: they are its metadata; its skippr.stream property follows at its
// next commit (renamedProps).
//
// The catalog's rename is its own commit, apart from the table's data commit, so a crash may fall between them.
// The replay of the range finds b's table and renames nothing, and its fence says what it holds. But a's items
// before the rename in the replayed range name a's table, which is gone: the apply must send them to b's table
// before it reaches the marker, or (when a's part outgrows the buffer and spills, which creates the table) it
// would create a's table anew. So before renaming, the apply records the intent in the namespace's properties
// (renameKey: a's table → stream b) and the completion marker's update removes it: a replay that finds the
// intent, a's table gone and b's there, sends a's items to b's table until b's first item.
type tableRenames struct {
	// intents are the namespace's recorded renames of this pipeline, by the former table: the stream renamed to.
	intents map[string]string
	// redirect: the items of the stream whose table is the key go to the table of the stream it maps to (a
	// replay whose rename is done), until that stream's first item of the apply.
	redirect map[string]string
	// hist: a former history table (missing) → the renamed one (there), for a replay after a crash between the
	// history's rename and the table's: the table has its old name, its history the new.
	hist map[string]string
	// seen: streams whose first item of the apply was looked at.
	seen map[string]bool
	// done: former tables whose rename this apply did or followed (its stream's marker was in the range): their
	// intents go with the completion marker. An intent whose marker lies beyond the range (a replay cut shorter)
	// stays for the apply that reaches it.
	done map[string]bool
}

func renameKey(pipeline, table string) string {
	return "skippr.pipeline." + pipeline + ".renamed-table." + table
}

// loadRenames reads the pipeline's recorded renames that the completion marker does not cover yet.
func (b *applyBuffer) loadRenames(ctx context.Context) error {
	b.renames = &tableRenames{intents: map[string]string{}, redirect: map[string]string{}, hist: map[string]string{}, seen: map[string]bool{}, done: map[string]bool{}}
	ns := b.s.NamespaceIdent()
	props, err := b.oc.cat.LoadNamespaceProperties(ctx, ns)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", strings.Join(ns, "."), err)
	}
	prefix := renameKey(b.req.Pipeline, "")
	for k, stream := range props {
		from, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		b.renames.intents[from] = stream
		gone, err := b.missing(ctx, from)
		if err != nil {
			return err
		}
		there, err := b.missing(ctx, b.s.TableName(stream))
		if err != nil {
			return err
		}
		if gone && !there {
			b.renames.redirect[from] = stream
		}
		oh, nh := historyTable(from), historyTable(b.s.TableName(stream))
		if gone, err = b.missing(ctx, oh); err != nil {
			return err
		}
		if there, err = b.missing(ctx, nh); err != nil {
			return err
		}
		if gone && !there {
			b.renames.hist[oh] = nh
		}
	}
	return nil
}

// history is the history table of table name: historyTable, or where a replayed rename moved it.
func (r *tableRenames) history(name string) string {
	h := historyTable(name)
	if n, ok := r.hist[h]; ok {
		return n
	}
	return h
}

// doneRenames are the namespace properties the completion marker's update removes: the intents of the renames
// this apply did or followed, covered once the marker moves.
func (b *applyBuffer) doneRenames() []string {
	if b.renames == nil {
		return nil
	}
	var out []string
	for t := range b.renames.intents {
		if b.renames.done[t] {
			out = append(out, renameKey(b.req.Pipeline, t))
		}
	}
	return out
}

// missing says whether the namespace has no table of that name.
func (b *applyBuffer) missing(ctx context.Context, name string) (bool, error) {
	_, err := b.oc.cat.LoadTable(ctx, append(b.s.NamespaceIdent(), name))
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("table %s: load: %w", name, err)
	}
	return false, nil
}

// followRename looks at the stream's first item of the apply for a table rename (see tableRenames), and sends
// the item to the renamed table when it belongs to a stream whose table a replayed rename moved.
func (b *applyBuffer) followRename(ctx context.Context, it *serve.Item) error {
	r := b.renames
	if !r.seen[it.Stream] {
		r.seen[it.Stream] = true
		if from := it.RenamedFromTable(); from != "" && from != it.Stream {
			if err := b.renameTable(ctx, from, it.Stream); err != nil {
				return fmt.Errorf("stream %s renamed from %s: %w", it.Stream, from, err)
			}
		}
	}
	if to, ok := r.redirect[b.s.TableName(it.Stream)]; ok && to != it.Stream {
		it.Stream = to
	}
	return nil
}

// renameTable renames the table of stream from to the table of stream to when the latter does not exist, and
// moves what the apply buffered for the former to the latter.
func (b *applyBuffer) renameTable(ctx context.Context, from, to string) error {
	old, nw := b.s.TableName(from), b.s.TableName(to)
	if old == nw {
		return nil
	}
	// From here on, items of stream from are of a new table of that name (the source may create it again).
	delete(b.renames.redirect, old)
	delete(b.renames.hist, historyTable(old))
	b.renames.done[old] = true
	oldGone, err := b.missing(ctx, old)
	if err != nil {
		return err
	}
	newGone, err := b.missing(ctx, nw)
	if err != nil {
		return err
	}
	if !oldGone && !newGone {
		// Both exist: the rename is done and the source made a table of the old name again, or the
		// destination's tables are not skippr's to move. Nothing is renamed; each stream writes its own table.
		b.d.log().Info("iceberg: stream renamed, but both tables exist; nothing renamed", "from", old, "to", nw)
		return nil
	}
	if !oldGone {
		if err := b.catalogRename(ctx, from, to, old, nw); err != nil {
			return err
		}
	}
	// The former table is gone (renamed now or before, or never created): what the apply holds for it is the
	// renamed table's.
	for _, pair := range [][2]string{{old, nw}, {historyTable(old), historyTable(nw)}} {
		if tb, ok := b.byTable[pair[0]]; ok {
			if err := b.rekey(ctx, tb, pair[1], to); err != nil {
				return err
			}
		} else if tb, ok := b.byTable[pair[1]]; ok && tb.g.stream == from {
			// The history a replay sent to the renamed table already (tableRenames.hist).
			if err := b.rekey(ctx, tb, pair[1], to); err != nil {
				return err
			}
		}
		delete(b.fences, pair[0])
	}
	return nil
}

// catalogRename records the intent, then renames the history table (when there is one and the new name is
// free) and the table. The history goes first: a crash between the two leaves the table under its old name,
// and the replay renames it then, while a table renamed first would make the replay rename nothing and leave
// the history behind.
func (b *applyBuffer) catalogRename(ctx context.Context, from, to, old, nw string) error {
	ns := b.s.NamespaceIdent()
	key := renameKey(b.req.Pipeline, old)
	if _, err := b.oc.cat.UpdateNamespaceProperties(ctx, ns, nil, iceberg.Properties{key: to}); err != nil {
		return fmt.Errorf("record the rename of %s in namespace %s: %w", old, strings.Join(ns, "."), err)
	}
	b.renames.intents[old] = to
	histGone, err := b.missing(ctx, historyTable(old))
	if err != nil {
		return err
	}
	newHistGone, err := b.missing(ctx, historyTable(nw))
	if err != nil {
		return err
	}
	pairs := [][2]string{{old, nw}}
	if !histGone && newHistGone {
		pairs = [][2]string{{historyTable(old), historyTable(nw)}, {old, nw}}
	}
	for _, p := range pairs {
		if _, err := b.oc.cat.RenameTable(ctx, append(ns, p[0]), append(ns, p[1])); err != nil {
			return b.renameRefused(p[0], p[1], err)
		}
		b.d.log().Info("iceberg: table renamed as the source renamed its stream", "from", p[0], "to", p[1], "stream", to, "was", from)
		if h := b.d.hooks.afterRename; h != nil {
			if err := h(p[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// renameRefused classifies a failed catalog rename: a catalog that does not offer renames cannot do it at any
// retry (config); anything else (a network fault) is left to the engine's retries.
func (b *applyBuffer) renameRefused(from, to string, err error) error {
	err = fmt.Errorf("rename table %s to %s in %s: %w", from, to, b.oc.name, err)
	if errors.Is(err, iceberg.ErrNotImplemented) || errors.Is(err, rest.ErrEndpointNotSupported) ||
		strings.Contains(strings.ToLower(err.Error()), "not supported") {
		return fault.ConfigErr(err, fmt.Sprintf("the %s catalog did not rename the table: rename %s to %s in the catalog yourself and restart the pipeline "+
			"(the plugin then finds the renamed table), or resnapshot the stream into a new table", b.s.Catalog.Type, from, to))
	}
	return err
}

// rekey moves a table's part of the apply to another table (of stream to): its items above that table's fence,
// and, when it spilled, its files, rebased onto the renamed table.
func (b *applyBuffer) rekey(ctx context.Context, tb *tableBuf, name, to string) error {
	if other, ok := b.byTable[name]; ok && other != tb {
		return fmt.Errorf("table %s holds changes of stream %s before stream %s was renamed to it in the same apply", name, other.g.stream, to)
	}
	fence, err := b.fence(ctx, name)
	if err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	if fence > tb.fence {
		if tb.sp != nil {
			return fmt.Errorf("table %s holds entries up to %d that this apply wrote out for %s already", name, fence, tb.g.table)
		}
		kept := tb.g.items[:0]
		for _, it := range tb.g.items {
			if b.below(it, fence) {
				if it.Record != nil {
					n := int64(util.TotalRecordSize(it.Record))
					tb.bytes -= n
					b.bytes -= n
					it.Record.Release()
				}
				continue
			}
			kept = append(kept, it)
		}
		clear(tb.g.items[len(kept):])
		tb.g.items = kept
		tb.fence = fence
	}
	meta, err := b.s.For(to)
	if err != nil {
		return err
	}
	if tb.g.history {
		meta.SoftDelete = false
	}
	delete(b.byTable, tb.g.table)
	tb.g.table, tb.g.stream, tb.g.meta = name, to, meta
	b.byTable[name] = tb
	b.fences[name] = tb.fence
	if tb.sp != nil && tb.sp.a != nil {
		// The written files stay where they are (a renamed table keeps its location); the transaction they are
		// committed in is opened again on the table under its new name.
		skipped, err := tb.sp.rebase(ctx, tb.sp.a.attempt+1)
		if err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
		tb.sp.skipped = tb.sp.skipped || skipped
	}
	return nil
}

// renamedProps are the table properties a commit sets beside the fence: the stream a renamed table holds now.
func (a *tableAttempt) renamedProps(props iceberg.Properties) iceberg.Properties {
	key := propStream
	if a.g.history {
		key = propHistory
	}
	if v, ok := a.tbl.Properties()[key]; ok && v != a.g.stream {
		props[key] = a.g.stream
	}
	return props
}
