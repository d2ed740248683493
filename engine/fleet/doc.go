// Package fleet runs many pipelines over many worker processes (`skippr worker`), coordinated by etcd: each
// pipeline runs on exactly one live worker at a time, pipelines are spread evenly, and a worker that dies
// loses its pipelines to the others within the etcd lease TTL.
//
// # Keys
//
// Under the fleet's prefix P (the path of etcd://h1:2379,h2:2379/P):
//
//	P/workers/<name>       a Member (JSON), attached to the worker's etcd lease: it exists while the worker lives
//	P/drain/<name>         a drain request (`skippr fleet drain NAME`); no lease, removed by `--cancel`
//	P/elect/<pipeline>/…   the pipeline's election (go.etcd.io/etcd/client/v3/concurrency); the oldest key leads
//	P/pipelines/<pipeline> a Holding (JSON) written by the holder, attached to its lease
//
// Every worker reads the same skippr.yml (see docs/fleet.md for why the config is not kept in etcd) and
// watches P/workers/. From the live, non-draining members it computes the same assignment (Assign: at most
// ⌈P/N⌉ pipelines per worker, pinned pipelines on their worker) and campaigns in the election of each pipeline
// assigned to it; it stops and resigns the ones no longer assigned to it. A draining worker marks itself in
// its Member, so the others take its share; it stops its pipelines the way SIGTERM does (the WAL commit and
// applies in flight finish) and only then resigns, which is when the next holder's campaign returns.
//
// # Correctness: etcd elects, the WAL fences, the destination fences again
//
// Three mechanisms, each covering what the previous one cannot:
//
//  1. etcd (Raft, linearizable writes) guarantees that at any revision at most one campaign key of a
//     pipeline's election is the oldest: at most one worker believes, from etcd's point of view, that it
//     holds the pipeline. A worker that dies or is cut off stops renewing its lease; etcd deletes its keys
//     when the TTL runs out, and the next candidate's campaign returns. This covers crashes, power loss and
//     network cuts, and lets a successor start without waiting for anything else. It does not stop a process
//     that is paused (SIGSTOP, a long GC or VM pause, a cut link) from waking up still believing it holds the
//     pipeline: etcd cannot reach into that process (etcd-io/etcd#10125). The worker also stops its pipelines
//     on its own when its lease clock runs out (no keep-alive answer for the TTL less a margin: leaseClock),
//     before etcd can expire the lease, which covers the common case of a cut link or a lost quorum, but that
//     is a timer, not a fence.
//  2. The S3 conditional writes of the pipeline's WAL (engine/wal/doc.go) are the fence. The election's
//     revision — etcd's cluster-wide, strictly increasing counter at which the winner's campaign key was
//     created — becomes the writer epoch of the WAL lease (wal.Options.Epoch). A successor's revision is
//     higher than every earlier holder's, so its Acquire takes the lease at once (compare-and-swap on
//     lease.json's ETag) and writes a fence entry in the next sequence number with If-None-Match. The
//     paused holder's next lease renewal then fails its compare-and-swap, and its next commit record's
//     conditional create finds the sequence number taken: it cannot commit after the takeover, whatever its
//     clocks say. An older revision is refused outright. This covers the zombie etcd cannot.
//  3. Each destination keeps its own fence (the last applied WAL sequence, committed in the same
//     transaction as the rows) and skips entries at or below it. Two appliers can exist for a moment — the
//     zombie may still be applying entries it read before it was fenced — but both apply the same committed
//     entries in the same order, and each destination commit is conditional on its fence, so a row lands
//     once. This covers the apply side, which the WAL lease does not guard.
//
// What is not covered: a local-disk WAL (no other worker can read it) — refused in fleet mode unless the
// pipeline is pinned to one worker (pipelines.NAME.fleet.pin), where flock(2) excludes a second writer.
// A source that admits one reader (a Postgres slot) is not fenced by any of this: the successor's start
// fails until the old reader's connection is gone, and the supervisor retries it (see docs/fleet.md).
package fleet
