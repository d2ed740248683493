// Package wal is skippr's write-ahead log: the engine's ledger of change
// batches. This comment is the storage format; code and format change together.
//
// # The invariant
//
// An entry exists if and only if its commit record exists. The engine
// acknowledges the source only after Commit returned, i.e. after the commit
// record is durable. A segment without a commit record is garbage: readers
// ignore it and the next writer deletes it in Acquire.
//
// # Locations
//
// A log lives at a root: a local directory (file:///abs/dir) or a bucket and
// key prefix (s3://bucket/prefix). Object names below are relative to it and
// the same on both backends (the local backend maps "/" to directories):
//
//	segments/<seq>-<epoch>.seg    one segment (frames of one entry)
//	commits/<seq>.json            commit record of entry <seq>
//	checkpoints/<seq>.json        checkpoint record written by Reclaim
//	LOCK, EPOCH                   local backend: writer lock and epoch counter
//	lease.json                    S3 backend: writer lease
//
// <seq> and <epoch> are unsigned 64-bit decimals zero-padded to 20 digits, so
// lexical order (directory listings, ListObjectsV2) is numeric order. Sequence
// numbers start at 1 and are contiguous: a gap is reported as an error naming
// the missing seq. The segment name carries the writer's epoch so that a
// fenced writer and its successor never write the same segment object; the
// commit record names the one segment that counts. Names starting with "." on
// the local backend are temporary files of an unfinished write.
//
// # Segment
//
// A segment is a 24-byte header followed by the body: the frame block as
// the header's codec stores it. All integers little-endian.
//
//	offset size field
//	0      4    magic "SKWL"
//	4      1    version = 1
//	5      1    codec: 0 = none, 1 = zstd, 2 = s2
//	6      2    reserved, 0
//	8      8    length of the decompressed frame block (at most 4 GiB)
//	16     4    CRC-32C (Castagnoli) of the decompressed frame block
//	20     4    number of frames
//
// Codecs:
//
//	0 none  the body is the frame block itself
//	1 zstd  one zstd stream (RFC 8878, with the zstd content checksum); the only codec before 2 and 0
//	2 s2    one S2 block (github.com/klauspost/compress/s2, the block format: the uvarint
//	        decompressed length, then the compressed data; no checksum of its own)
//
// A writer uses one codec for its segments (Options.Compression, default s2);
// readers read every codec whatever their own setting, so a log may mix them
// (written under one setting, continued under another). Codecs 0 and 2 came
// under the same segment version as zstd: a reader older than them refuses
// such a segment as corrupt (unknown compression codec) rather than misread it.
// Whatever the codec, the header's CRC-32C covers the decompressed frame block
// and the commit record's covers the stored object, so damage is ErrCorrupt
// either way (S2 and none carry no checksum of their own).
//
// The frame block is the frames back to back, each:
//
//	1 byte   kind: 1 = batch (Arrow IPC stream bytes of one change batch),
//	               2 = schema (Arrow IPC stream bytes of a schema alone: a schema change),
//	               3 = truncate (no data: every row of the stream before this frame
//	                   is gone, rows after it are kept)
//	               4 = resnapshot (data: one byte, 0 = begin, 1 = end of a re-snapshot
//	                   of the stream: at the end, rows of the stream not received since
//	                   the begin are gone)
//	2 bytes  length of the stream name (1..65535), then the UTF-8 name
//	8 bytes  row count (signed, >= 0; 0 for a schema, truncate or resnapshot frame)
//	8 bytes  data length, then the data (0 for a truncate frame, 1 for a resnapshot frame)
//
// A frame block must end exactly after the last frame. Commit checks that
// every batch and schema frame's data starts with a readable Arrow IPC schema
// message. Kind 3 came later under the same segment version: every segment
// written before it still reads, and a reader older than it refuses a segment
// holding one as corrupt (unknown kind) rather than skipping the truncate. Kind 4
// came later still, on the same terms.
//
// # Records
//
// Commit, checkpoint, lease and epoch records are one line of JSON, an
// envelope that checksums its own body byte for byte:
//
//	{"kind":"commit","crc32c":<CRC-32C of the exact bytes of body>,"body":{…}}
//
// A commit record's body:
//
//	seq         entry sequence number (equal to the number in the object name)
//	segment     segment object name relative to the root ("segments/…"); "" for a fence entry
//	crc32c      CRC-32C of the segment object's bytes as stored (header and body)
//	size        size in bytes of the segment object as stored
//	rows        rows per stream (streams with only schema or truncate frames appear with 0)
//	schema_ids  per stream, an opaque id of the schema in force after the entry
//	            (the stream's last frame): "s1-" + 32 hex digits of SHA-256 over
//	            the Arrow schema fingerprint and its metadata
//	checkpoint  the source checkpoint this entry covers (opaque bytes, base64 in JSON)
//	epoch       the writer epoch that committed it
//	time        commit time, RFC 3339 UTC
//
// ReadSegment verifies size and CRC-32C before decoding; a mismatch is
// ErrCorrupt naming the seq and object, an absent segment ErrMissing.
//
// A fence entry (segment "", size 0, no rows) repeats the previous entry's
// checkpoint. A writer writes one right after taking over an S3 lease that its
// previous holder never released (see below); destinations apply it as an
// empty batch.
//
// # Reclaim
//
// Reclaim(upTo) first creates checkpoints/<upTo>.json holding upTo and the
// source checkpoint of entry upTo; from that moment entries <= upTo are gone
// for every reader (Entries with an older position fails with ErrReclaimed).
// Then it deletes commit records <= upTo, then their segments, then older
// checkpoint records, each batch in parallel and in no order. A reader whose
// listing meets those deletes finds a hole at or below the mark, which it
// reads as the Reclaim's (ErrReclaimed: look again from the mark); a hole above
// the mark is a lost entry (ErrMissing naming it). The newest checkpoint
// record wins, so a crash at any point leaves a readable log, and a restart
// with every entry reclaimed still knows the last seq and the source
// checkpoint (Head). Acquire finishes an interrupted Reclaim. Reclaim runs
// beside Commit, not under its lock: it only touches entries <= upTo, and
// Commit only writes entries > last >= upTo.
//
// # Writing and durability
//
// Commit(frames, checkpoint) with seq = last+1:
//
//  1. write segments/<seq>-<epoch>.seg (may replace an uncommitted one of the same name);
//  2. create commits/<seq>.json, never replacing an existing one.
//
// Local disk: each object is written to a hidden temp file in its directory,
// fsynced, then renamed (segment) or hard-linked (commit and checkpoint
// records: link(2) fails with EEXIST instead of replacing), and the directory
// is fsynced; the segment's directory is fsynced before the commit record is
// created. S3: PUT with the object's CRC-32C in x-amz-checksum-crc32c (the
// server rejects a damaged upload); the commit record PUT carries
// If-None-Match: "*", so of two writers racing for one seq exactly one
// succeeds and the other gets 412 and reports ErrFenced. If the commit record
// write fails in a way that leaves its outcome unknown, the Log refuses to
// write again until reopened, because retrying could commit one batch twice.
//
// # Writer exclusion
//
// Local: the writer holds an exclusive flock(2) on LOCK for the life of the
// Log and writes its owner, pid and epoch into it (plain JSON, used only for
// messages and Head); the kernel drops the lock when the process dies, so
// there is never a live stale holder. EPOCH holds the last epoch (a record as
// above), incremented by every Acquire. Before each commit the writer checks
// that LOCK is still the file it locked. RESERVE (64 KiB of zeros) is space
// set aside at Acquire: when the disk is full, Reclaim deletes it to write
// its checkpoint record (it may delete nothing before that record exists) and
// sets it aside again after freeing space. A commit that finds the disk full
// leaves nothing behind and returns ErrNoSpace; it may be retried.
//
// S3: lease.json holds {owner, host, pid_space, pid, token, epoch, expires,
// released}. Acquire creates it with If-None-Match: "*" or replaces an expired
// or released one with If-Match: <ETag> (compare-and-swap), incrementing the
// epoch; a live, unreleased lease gives ErrLocked naming owner and expiry. One
// shortcut: a holder whose pid_space (boot id and PID namespace inode) equals
// the taker's and whose pid no longer exists is dead, and its lease is taken at
// once. The host name never decides it: containers share host names but not
// pids. The holder renews
// every TTL/3 with If-Match on the ETag it last wrote; a 412 means another
// writer took over, and the holder is fenced for good. Close writes
// released=true the same way.
//
// The lease is time-based, and the reasoning is this. A renewal that starts
// at local time t0 writes expires = t0 + TTL (wall clock). A taker replaces
// the lease only when its own wall clock is past expires. The holder commits
// only while its monotonic clock is before t0 + TTL - TTL/4 (the safety
// margin): it checks this before writing a segment and again before creating
// the commit record, and bounds the commit record write by that deadline. (A
// late segment upload is harmless: no record names it and its name holds the
// old epoch; the next Acquire deletes it.) So as long as the two machines'
// clocks differ by less than TTL/4 and a request is processed within the
// remaining margin, the holder has stopped writing before anyone else may
// start; a holder that cannot renew stops on its own (ErrFenced) even if it
// never hears from anyone.
//
// Because clocks and networks can break those assumptions, the new holder
// does not rely on them for the ledger itself: after taking over a lease that
// was not released it creates a fence entry at last+1 under its own epoch
// (adopting any entries the old holder managed to commit first). The old
// holder's next seq is then taken, so its conditional create fails and it
// cannot commit after the takeover. Only then does Acquire delete orphan
// segments and return. Entries are therefore totally ordered, and the source
// checkpoint Head reports after Acquire covers every entry.
//
// # Elected epochs (fleet mode)
//
// In fleet mode (engine/fleet) an etcd election decides which worker runs a
// pipeline, and the election's revision (etcd's cluster-wide, strictly
// increasing counter) is passed to Acquire as Options.Epoch. On S3 the lease
// then carries exactly that epoch, and Acquire decides by comparing it with
// the stored lease's epoch (and with the newest epoch in segment names):
//
//   - lower: refused with ErrFenced, since a newer holder was elected;
//   - higher: the lease is taken at once even if it has not expired, with a
//     fence entry as above when its holder never released it, because the
//     election already proved that holder lost its etcd lease;
//   - equal: the usual rules (the same holder again in one election term).
//
// A previous holder that is merely paused can therefore wake up still
// believing it leads: its renewal's compare-and-swap fails (412) and its next
// commit record's conditional create finds the fence entry in its seq. The
// election alone is not the fence (etcd-io/etcd#10125); the S3 conditional
// writes are. The local backend ignores Options.Epoch: its flock already
// excludes a second writer, and fleet mode refuses a local WAL unless the
// pipeline is pinned to one worker.
//
// # Crash points
//
// A failpoints build (engine/failpoint) can stop Commit at wal.after-segment
// (segment durable, no commit record) and Reclaim at wal.after-reclaim-record
// (checkpoint record durable, nothing deleted): the two windows this format
// promises to survive above, as deterministic tests.
package wal
