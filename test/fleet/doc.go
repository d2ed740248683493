// Package fleet holds the tests of skippr fleet (workers electing through etcd, pipelines moving between them)
// and of syncs across network namespaces (testkit/netns hosts), including TestFleetChaos's faults
// (SKIPPR_FLEET_CHAOS_FAULTS). The netns tests need root.
package fleet
