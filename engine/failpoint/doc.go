// Package failpoint holds the engine's named crash points: places in the commit protocol where a test can make
// the process die (or wait, or fail) on purpose, so each crash window is a plain, deterministic test instead of
// a SIGKILL landing there by chance. Modelled on etcd's gofail, without its code generation.
//
// # Build tag
//
// The points exist only in a binary built with the tag `failpoints` (`go build -tags failpoints`). Without it
// Hit is an empty function returning nil, which the compiler inlines and removes together with the branch
// that checks it: the release binary carries neither the points' names nor this package's parser. Enabled
// tells the two builds apart.
//
// # Arming
//
// A failpoints build reads the environment variable SKIPPR_FAILPOINTS once, when the process starts:
//
//	SKIPPR_FAILPOINTS=<point>=<term>[,<point>=<term>…]
//	<term> = [<n>*]<action>
//	<action> = exit | error | sleep(<ms>) | wait(<file>)
//
// The point fires at its n-th hit (default 1), once; the hits before and after pass. Actions:
//
//	exit        the process SIGKILLs itself: no deferred call runs, no file is flushed, no plugin is told —
//	            a power cut as far as the WAL and the destinations can tell
//	error       Hit returns an error wrapping ErrInjected (defined in failpoints builds only); the code at the point fails as it would on an I/O error
//	sleep(ms)   Hit sleeps that many milliseconds, then returns nil
//	wait(file)  Hit blocks until the file exists (polling every 10 ms), then returns nil: the test does what
//	            the window is for and then creates the file, so the window is as wide as the test needs and
//	            no wider (a sleep would be a guess at how long the test takes on a loaded machine). The path
//	            may not hold a comma or a closing parenthesis.
//
// Before it acts, a firing point writes one line to stderr, so a test can prove which point fired:
//
//	failpoint <point> fired (hit <n>): <action>
//
// A value that does not parse, or names a point not in the list below, makes the process print why and exit
// with status 2 at start: a misspelt point would otherwise never fire and a test would pass for nothing.
// The state is process-wide by nature (one environment per process); it exists only in failpoints builds.
//
// # Points
//
// The list is the contract: tests arm these names, and each sits where its comment says. Points are named
// after the package that hits them.
//
//	wal.after-segment         Log.Commit: the segment is durable, the commit record not yet written. The
//	                          entry does not exist; the next writer deletes the segment.
//	pipeline.after-commit     the commit record is durable, the source not yet acknowledged. The entry
//	                          exists; the source sends its rows again, and they become a second entry.
//	pipeline.after-ack        the source is acknowledged, the entry not yet handed to the apply loops.
//	pipeline.apply-sent       a destination has been sent every item of an apply, and its result is not in:
//	                          the destination may or may not have committed the range.
//	pipeline.after-apply      a destination committed an apply, and the engine has not recorded it: the
//	                          restart learns it from the destination (LastApplied) and skips the range.
//	wal.after-reclaim-record  Log.Reclaim: the checkpoint record is durable, the entries it covers not yet
//	                          deleted. Acquire finishes the reclaim.
//
// The query path (`skippr query`, `skippr serve`) has its own points, outside the commit protocol (Points lists
// the protocol's, which TestCrashPoints kills a sync at; QueryPoints the query path's):
//
//	lakequery.after-list      a statement has listed a pipeline's WAL entries and not yet read their segments:
//	                          a sync that applies and reclaims them now deletes what the statement is about to
//	                          read.
package failpoint

// The points (see the package doc).
const (
	WALAfterSegment       = "wal.after-segment"
	PipelineAfterCommit   = "pipeline.after-commit"
	PipelineAfterAck      = "pipeline.after-ack"
	PipelineApplySent     = "pipeline.apply-sent"
	PipelineAfterApply    = "pipeline.after-apply"
	WALAfterReclaimRecord = "wal.after-reclaim-record"
	LakequeryAfterList    = "lakequery.after-list"
)

// Points lists the commit protocol's points, in its order.
var Points = []string{WALAfterSegment, PipelineAfterCommit, PipelineAfterAck, PipelineApplySent, PipelineAfterApply, WALAfterReclaimRecord}

// QueryPoints lists the query path's points: a sync never hits them.
var QueryPoints = []string{LakequeryAfterList}

// Known is every point a SKIPPR_FAILPOINTS value may arm.
func Known() []string { return append(append([]string(nil), Points...), QueryPoints...) }

// EnvVar arms points in a failpoints build.
const EnvVar = "SKIPPR_FAILPOINTS"
