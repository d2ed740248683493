package connector

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// Catalog is a source's streams with their data columns, as `skippr discover` prints them.
type Catalog []StreamColumns

// StreamColumns is one stream: its key, sync modes, schema id and data columns (change metadata left out).
type StreamColumns struct {
	Name       string   `json:"name"`
	PrimaryKey []string `json:"primary_key"`
	Modes      []string `json:"modes"`
	SchemaID   string   `json:"schema_id"`
	Fields     []Column `json:"fields"`
}

// Column is one data column of a stream.
type Column struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// CatalogOf decodes each stream's Arrow schema; an undecodable one is an error naming the stream.
func CatalogOf(streams []Stream) (Catalog, error) {
	var out Catalog
	for _, st := range streams {
		sc, err := protocol.DecodeSchema(memory.DefaultAllocator, st.ArrowSchema)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", st.Name, err)
		}
		ds := StreamColumns{Name: st.Name, PrimaryKey: st.PrimaryKey, SchemaID: st.SchemaID}
		for _, m := range st.Modes {
			ds.Modes = append(ds.Modes, m.String())
		}
		for _, f := range change.DataFields(sc) {
			ds.Fields = append(ds.Fields, Column{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable})
		}
		out = append(out, ds)
	}
	return out, nil
}

// WriteText prints each stream's header line, then its columns.
func (c Catalog) WriteText(w io.Writer) error {
	for _, ds := range c {
		fmt.Fprintf(w, "stream %s  key (%s)  modes %s\n", ds.Name, strings.Join(ds.PrimaryKey, ", "), strings.Join(ds.Modes, ", "))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, f := range ds.Fields {
			null := "not null"
			if f.Nullable {
				null = "null"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Name, f.Type, null)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
