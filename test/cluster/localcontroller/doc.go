/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package localcontroller runs the controller (cmd/controller) as local
// processes against the cluster of test/cluster/cluster-up.sh, the way its
// Deployment (config/500-controller.yaml) runs it in a cluster:
//   - as the Deployment's ServiceAccount, never as admin: a token minted for
//     it goes into _output/cluster/controller.kubeconfig;
//   - with the Deployment's environment, read from the YAML, the downward
//     API's fields filled in (POD_NAME is sandbox-snapshot-controller-local-N);
//   - with leader election on, so several instances can run side by side.
//
// It also sets the registry key of config-snapshot when it is empty (config/
// leaves it unset on purpose). Without a Tekton controller nothing is ever
// pushed there.
//
// Files, per instance N, beside those of the control plane's daemons:
//
//	_output/cluster/pids/controller-N.pid           the controller's pid
//	_output/cluster/pids/controller-N-watchdog.pid  stops the controller when the API server goes
//	                                                (so that cluster-down.sh leaves no orphan)
//	_output/cluster/logs/controller-N.log           its log (JSON lines), appended across starts
//	_output/cluster/controller-N.env                ports and log offset of the current run
//
// Ports: sharedmain serves pprof on PROFILING_PORT and Prometheus metrics
// (when config-observability enables them, as config/ does) on
// METRICS_PROMETHEUS_PORT of 127.0.0.1; each instance gets free ones, recorded
// in its controller-N.env. The health-probe port is fixed at 8080 by
// sharedmain (injection.HealthCheckDefaultPort, no variable): only the first
// instance serves /health and /readiness. In a further instance the probe
// server fails to bind, silently: sharedmain then shuts that instance's pprof
// server down too, and the controller runs on without either. Readiness is
// therefore read from the log ("Starting controllers", logged once the
// informers have synced).
package localcontroller
