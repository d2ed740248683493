// Package dest is skippr's Iceberg destination: it commits the batches of one WAL sequence number into Iceberg
// tables through iceberg-go, exactly once. This comment is the format skippr keeps in the catalog and tables.
//
// # Tables
//
// Stream S lands in table NAMESPACE.T, T = settings.tables[S] or S. skippr creates a missing table from the
// stream's Arrow schema, without the reserved _skippr_ columns, with
//
//   - the primary key columns as required identifier fields (the equality-delete key);
//   - partition spec 0 unpartitioned; a configured spec (settings.partitions[S]) is added as spec 1 by the
//     commit of the table's first rows, so spec 0 stays available for global equality deletes;
//   - table properties format-version (2 unless format_version says 3), write.target-file-size-bytes, and
//     skippr.stream = S (LastApplied reports a table's fence under this stream name).
//
// # One apply
//
// For apply N of pipeline P, each table touched gets ONE Iceberg commit holding, atomically:
//
//   - schema updates (added columns, widened types, columns made optional) for every schema the items carry;
//   - on a format v2 table, when a column is added with a value for the existing rows (ADD COLUMN … DEFAULT;
//     v3 takes it as the column's initial-default), a "replace" snapshot before the RowDelta: every live data
//     file rewritten with the value, deletes applied, and every live delete file removed. Its summary carries
//     skippr.filled-columns = the columns and skippr.stream = S, not the fence (fill.go);
//   - one RowDelta snapshot: data files with the surviving version of each key, and equality-delete files on
//     the identifier fields for every key updated or deleted in N (and, with upsert_inserts, inserted). The
//     deletes carry a higher data sequence number than every earlier file and the same as the new data files,
//     so they remove earlier versions and never the rows added beside them. The snapshot summary carries
//     skippr.pipeline.P.sequence = N and skippr.stream = S, for lineage;
//   - the table property skippr.pipeline.P.sequence = N: the table's fence. Table properties survive snapshot
//     expiry and compaction by other engines, which a snapshot-summary fence would not.
//
// Within one apply, ops on the same key collapse to the last one in log order before anything is written.
// An apply larger than the memory budget (settings memory_limit) is folded and written in chunks as it
// arrives, all added by the table's one commit; a chunk's change to a key an earlier chunk wrote adds a position
// delete (v2: a Parquet position-delete file per data file, file-scoped by its file_path bounds; v3: a
// deletion vector) of that row to the same RowDelta, since equality deletes do not reach files of their own
// commit. The tables of an apply commit in parallel, each in its own commit.
// Equality deletes are partition-scoped when every partition source column is a key column (a key then never
// changes partition); otherwise they are written under the unpartitioned spec 0 and apply to all partitions.
//
// After every table's commit, the namespace property skippr.pipeline.P.sequence = N is set: the completion
// marker. LastApplied returns it as Sequence, and each table's fence in Streams.
//
// # Why two records
//
// Iceberg has no commit spanning tables (the SQL catalog commits one table per transaction). A crash between
// the commits of tables A and B leaves A at N and B below N. The engine resumes after LastApplied's Sequence,
// so reporting the maximum fence (N) would lose B's rows; reporting the minimum would be wrong the other way
// for a table untouched since long ago. The marker says N only once every table of N committed. When the
// engine sends N again, A skips its part (its fence is N), B applies its part, and the marker moves to N.
// An apply is reported Skipped only when every table it touches was already at N.
//
// A coalesced apply takes the range of entries F..N (Capabilities.Coalesce) the same way: each table's commit
// records N, the marker moves to N, and a replay of a range that overlaps what a table holds applies only the
// items of entries above the table's fence (or the marker, if higher): those below are in the table already.
//
// # Soft deletes, metadata columns, history
//
// Per stream (rowmeta.Settings.For), the columns plugin-sdk/rowmeta names are appended to each change batch and
// reach the table by schema evolution like any column; a soft delete is an upsert of the key's last values under
// the delete's metadata (rowmeta.go). With history, <table>_history is one more table of the apply, appended to,
// fenced by its own skippr.pipeline.P.sequence, marked skippr.history = S (history.go).
//
// # Re-snapshots
//
// A re-snapshot of stream S (serve.Capabilities.Resnapshot) is open while table property
// skippr.pipeline.P.resnapshot holds the id of the snapshot the table was at before the commit of the apply that
// carried its begin mark ("none": no snapshot), set in that commit. The rows received since are the data files
// that P's apply snapshots (those whose summary has skippr.pipeline.P.sequence) added after that snapshot, plus
// the end's own apply's rows before the end mark (a begin and end within one apply count only the rows between
// them: the apply's rows before the begin not received again are deleted in its fold). The commit of the apply that carries the end mark adds
// equality deletes for every live key of the table outside that set and removes the property. While one is open,
// inserts and reads of S are written as upserts, and `compact` does not expire snapshots. See resnapshot.go.
// The end's diff of received and live keys stays in maps while they fit the memory budget; past it both sides
// are partitioned by key hash into local files and diffed partition by partition (keydiff.go).
//
// # Conflicts
//
// A commit that loses a race (another writer committed to the table first) is rebuilt from the reloaded
// table — fence check, schema, files — up to maxCommitAttempts times, and the losing attempt's files are
// removed. Files of a commit whose outcome is unknown (a network error after the request was sent) are kept:
// the catalog may hold them; if not, they are orphans that compaction's orphan cleanup removes.
package dest
