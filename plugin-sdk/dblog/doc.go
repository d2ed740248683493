// Package dblog copies a table again while the source keeps streaming its log: the watermark method of DBLog and
// Debezium's incremental snapshots (`skippr resnapshot`, serve.ReadRequest.Resnapshot, and tables added to a
// running pipeline). Each source runs one Copier per Read; the Copier holds what every source does the same way,
// the source (a Source) what depends on its server.
//
// # The method
//
// Tables are copied one at a time, in name order, one chunk at a time, always between two transactions of the
// log. For a chunk the Copier writes a low watermark into the log (Source.WriteMark), reads the next rows after
// the last key copied (Source.ReadChunk), and writes a high watermark. The source goes on streaming and reports
// every key of the table its log changes (Copier.Saw), from the moment the chunk started — before the low mark.
// When the high mark comes out of the log (Copier.Mark), the chunk's rows whose key was reported are dropped: the
// log has sent a change of each at least as new as the chunk's copy, and follows it with every later one. The
// rest go out as snapshot reads (Source.Emit), in runs that are slices of the chunk (KeptRuns), and the progress
// moves to the chunk's last key. A chunk shorter than the chunk size is the table's last.
//
// Dropping more keys than changed between the two marks is always safe (each dropped key has a change in the log
// after the table's begin mark), which is why the window opens when the chunk starts rather than at the low mark:
// a transaction committed just before the low mark may still be invisible to the chunk's read.
//
// # What the Copier promises
//
//   - For each table: Source.Begin once, before its first chunk (not again for a table whose Progress says
//     Begun); then chunks in key order, each bracketed by a low and a high mark with one id, fresh for every
//     chunk and unique to the Copier (a random nonce and a sequence), so the marks of an earlier Read in a
//     replayed log are ignored; then Source.Copied with done once the last chunk went out.
//   - At most one chunk is in flight. Its rows are emitted only after its high mark came out of the log and after
//     its low one; a high mark first is an error.
//   - The Progress of a table (Copier.Progress, for the source's checkpoints) names the last key whose chunk went
//     out: a Read resumed from it loses at most the chunk that was in flight.
//   - A chunk's record is released once it went out, was dropped, or at Close.
//
// # What a source must do
//
//   - Call Step between two transactions of its log only (never inside one), as often as it likes: it starts a
//     chunk when none is in flight and a table is left.
//   - Report every change of a table while a chunk of it is in flight with Saw, its key in the same form as
//     Chunk.Keys (the same row read from the log and by a select must give the same string).
//   - Hand every watermark that comes out of its log to Mark, in log order with the changes.
//   - Write marks that commit on their own and reach the log in the order written (Source.WriteMark), and read a
//     chunk that sees every transaction committed before the read began (Source.ReadChunk).
//   - Put Copier.Progress in every checkpoint, and not report itself idle while Copier.Active.
package dblog
