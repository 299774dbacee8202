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

// Command bench measures the SandboxSnapshot controller against a real
// kube-apiserver, beside OpenSandbox's own controller on the same API server.
// test/bench/controlplane/run.sh (make bench-control-plane) brings up the
// cluster and kwok's node and runs bench sweep, which runs the rest:
//
//	bench sweep              every size and trial (-sizes, -trials), each with the three
//	                         runs below on sandboxes made afresh; then the report
//	bench setup       -n N   N BatchSandboxes, each with a pod on the kwok node, all Running
//	bench run         -n N   one warm-up snapshot, then N snapshots in one burst; every
//	                         TaskRun is completed the moment it appears; writes a result file
//	bench opensandbox -n N   the same with OpenSandbox's controller: every commit Job's pod
//	                         is completed the moment kwok runs it; writes a result file
//	bench cleanup     -n N   deletes the namespace (the controller finalizes the snapshots)
//	bench limit       -n N   with no controller running: what the API server allows, a
//	                         write-only client making each snapshot's writes; writes a result file
//	bench report      FILE…  prints the three side by side (-markdown: as Markdown)
//
// The controllers run as their own processes (test/cluster/run-controller.sh,
// OpenSandbox's built by test/cluster/opensandbox-build.sh); bench only plays the
// parts of OpenSandbox's sandboxes and pods, Tekton (TaskRun status) and the
// kubelet of the commit Jobs' pods.
//
// bench sweep writes, in _output/bench/, result-N-tT.json (this controller's
// burst of size N in trial T), limit-N-tT.json and opensandbox-N-tT.json,
// report.txt and report.md (per size, the three side by side with the ratios
// ours / write-only client's and ours / OpenSandbox's, each figure the mean
// over the trials). Its flags -sizes, -trials, -timeout, -containers and
// -opensandbox default to BENCH_SIZES, BENCH_TRIALS, BENCH_TIMEOUT,
// BENCH_CONTAINERS and BENCH_OPENSANDBOX (defaultsFromEnv).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	pipelineclient "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	sandboxclient "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/clientset/versioned"
)

// systemNamespace is where the controller makes TaskRuns.
const systemNamespace = "sandbox-snapshot-system"

// options are the flags every subcommand shares.
type options struct {
	kubeconfig string
	n          int
	node       string
	containers int
	out        string
	pid        int
	apiPid     int
	etcdPid    int
	markdown   bool
	trial      int
	timeout    time.Duration

	// sweep's: the repository root, what it runs, and whether OpenSandbox's
	// controller is measured too.
	root        string
	sizes       sizeList
	trials      int
	openSandbox bool
}

func (o *options) namespace() string { return fmt.Sprintf("bench-%d", o.n) }

// clients talk to the apiserver as admin, without client-side rate limits,
// and count their own requests so that they can be told from the controller's.
type clients struct {
	kube          kubernetes.Interface
	dynamic       dynamic.Interface
	sandbox       sandboxclient.Interface
	pipeline      pipelineclient.Interface
	apiextensions apiextensionsclient.Interface
	own           *requestCounter
}

func newClients(kubeconfig string) (*clients, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling: the controller is what is measured
	own := &requestCounter{}
	cfg.Wrap(own.wrap)
	c := &clients{own: own}
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.sandbox, err = sandboxclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.pipeline, err = pipelineclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.apiextensions, err = apiextensionsclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd := os.Args[1]
	d, err := defaultsFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", cmd, err)
		os.Exit(2)
	}
	o := &options{sizes: d.sizes}
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig of the cluster")
	fs.IntVar(&o.n, "n", 100, "number of sandboxes and snapshots")
	fs.StringVar(&o.node, "node", "kwok-node-0", "the kwok node the sandbox pods run on")
	fs.IntVar(&o.containers, "containers", d.containers, "containers per sandbox pod")
	fs.StringVar(&o.out, "out", "", "run, opensandbox, limit: result file (JSON)")
	fs.IntVar(&o.pid, "pid", 0, "run, opensandbox: controller pid, for its peak RSS and CPU time")
	fs.IntVar(&o.apiPid, "apiserver-pid", 0, "run, opensandbox, limit: kube-apiserver pid, for its CPU time")
	fs.IntVar(&o.etcdPid, "etcd-pid", 0, "run, opensandbox, limit: etcd pid, for its CPU time")
	fs.IntVar(&o.trial, "trial", 1, "run, opensandbox, limit: the trial's number, recorded in the result")
	fs.BoolVar(&o.markdown, "markdown", false, "report: a Markdown table")
	fs.DurationVar(&o.timeout, "timeout", d.timeout, "how long a step may take")
	fs.StringVar(&o.root, "root", ".", "sweep: the repository root, whose _output/ holds the cluster's state and the results")
	fs.Var(&o.sizes, "sizes", "sweep: the sizes N, space-separated")
	fs.IntVar(&o.trials, "trials", d.trials, "sweep: how many times each size runs")
	fs.BoolVar(&o.openSandbox, "opensandbox", d.openSandbox, "sweep: measure OpenSandbox's controller too")
	_ = fs.Parse(os.Args[2:])

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	switch cmd {
	case "report":
		err = report(os.Stdout, o.markdown, fs.Args())
	case "sweep", "setup", "run", "opensandbox", "cleanup", "limit":
		var c *clients
		if c, err = newClients(o.kubeconfig); err != nil {
			break
		}
		switch cmd {
		case "sweep":
			err = sweep(ctx, os.Stdout, c, o)
		case "setup":
			err = setup(ctx, c, o)
		case "run":
			err = run(ctx, c, o)
		case "opensandbox":
			err = openSandbox(ctx, c, o)
		case "cleanup":
			err = cleanup(ctx, c, o)
		case "limit":
			err = limit(ctx, c, o)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: bench sweep [flags] | bench setup|run|opensandbox|cleanup|limit [-n N] [flags] | bench report [-markdown] RESULT.json...")
	os.Exit(2)
}

// logf prints a progress line to stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
