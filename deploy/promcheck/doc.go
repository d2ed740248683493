// Package promcheck holds the test of the PromQL in deploy/: every expression of grafana-dashboard.json and of
// prometheus-alerts.yml parses with Prometheus' own parser, and every metric it selects is in docs/metrics.md.
//
// It is its own module, outside go.work, because github.com/prometheus/prometheus would raise eight of the
// engine's dependencies (grpc-gateway, otelhttp, envoy's control plane, …) in the workspace's build list for a
// test that needs none of them. Run it with `make check-deploy` (GOWORK=off). That the names in docs/metrics.md
// are the ones the engine registers is engine/metrics' TestMetricsReference; that the dashboard's and the alert
// rules' names are registered is engine/metrics' TestDeployMetricNames.
package promcheck
