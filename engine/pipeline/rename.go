package pipeline

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// A source that follows a RENAME TABLE of a captured table goes on under the new stream, whose schema change
// records the former name (change.RenamedFromTableMeta); destinations with Capabilities.RenamedStream rename
// their table. A destination built before the capability existed would create the new table empty and leave
// the old one behind: the rows would not be lost, but no reader would find them where they belong, and
// nothing would say so. So the rename is refused before it reaches the WAL: the entry that holds it is not
// committed, the source is not acknowledged, and after the destination's plugin is upgraded the source sends
// the rename again from its last acknowledged point.
//
// Only a schema change can carry the marker first: sources announce a stream's new schema before the first
// batch that uses it (serve.Emitter.SchemaChange), and a destination follows the rename at that item. The
// schemas are decoded only while some destination lacks the capability.

// renameRefusal returns the pipeline's fault for a schema change of stream that records a rename, or nil when
// it records none or every destination follows renames.
func (r *runner) renameRefusal(stream string, schemaIPC []byte) error {
	if len(r.renameless) == 0 {
		return nil
	}
	s, err := protocol.DecodeSchema(memory.DefaultAllocator, schemaIPC)
	if err != nil {
		return fmt.Errorf("pipeline %s: source %s: schema change of %s: %w", r.cfg.Name, r.cfg.Source.Name, stream, err)
	}
	from := change.RenamedFromTable(s)
	if from == "" || from == stream {
		return nil
	}
	dests := strings.Join(r.renameless, ", ")
	return fault.ConfigErr(
		fmt.Errorf("pipeline %s: source %s renamed table %s to %s, and destination %s does not follow a renamed table (its plugin was built before plugin SDK 0.8): it would start %s empty and leave %s's rows behind; nothing of the rename was written to the WAL",
			r.cfg.Name, r.cfg.Source.Name, from, stream, dests, stream, from),
		fmt.Sprintf("upgrade the plugin of destination %s to a version built with plugin SDK 0.8 or later and start the pipeline again: the source was not acknowledged, so it sends the rename again", dests))
}
