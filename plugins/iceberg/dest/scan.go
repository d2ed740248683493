package dest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Scan reads a table's current snapshot, deletes applied, and hands its rows to fn in batches. It is what
// `skippr-plugin-iceberg scan` prints, for checking a table from outside the engine.
func Scan(ctx context.Context, raw json.RawMessage, stream string, fn func(arrow.RecordBatch) error) error {
	s, err := ParseSettings(raw)
	if err != nil {
		return err
	}
	oc, err := connect(ctx, s)
	if err != nil {
		return err
	}
	defer oc.Close()
	ident := append(s.NamespaceIdent(), s.TableName(stream))
	tbl, err := oc.cat.LoadTable(ctx, ident)
	if err != nil {
		return fmt.Errorf("load table %v: %w", ident, err)
	}
	at, err := tbl.Scan().ToArrowTable(ctx)
	if err != nil {
		return fmt.Errorf("scan table %v: %w", ident, err)
	}
	defer at.Release()
	tr := array.NewTableReader(at, 4096)
	defer tr.Release()
	for tr.Next() {
		if err := fn(tr.RecordBatch()); err != nil {
			return err
		}
	}
	return tr.Err()
}
