// Package chaos holds the tests that SIGKILL skippr (or a plugin) or inject faults while it runs, and then check
// the destination row by row against the source: every *SurvivesSIGKILL test, TestChaos and TestChaosFaults; the
// features' tests whose point is surviving SIGKILLs (keyless full_row copies, a MySQL re-snapshot); and the tests
// that check `skippr serve`'s answers while the sync beside it is killed or reclaims under a statement
// (TestServeBesideSIGKILLedSync, TestServeReclaimBetweenListAndRead).
// SKIPPR_CHAOS_KILLS and SKIPPR_CHAOS_FAULTS raise their small default counts (`make chaos`).
package chaos
