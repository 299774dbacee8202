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

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/clientset/versioned"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/teardown"
)

// runTeardown runs `controller teardown`, the chart's pre-delete hook, and
// returns the exit code.
func runTeardown(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("controller teardown", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: controller teardown [--namespace NS] [--deployment NAME] [--timeout D] [--snapshot-namespace NS]")
		fmt.Fprintln(stderr, "Scales the controller to zero, waits for its pods to go, then removes the operator's finalizer from every SandboxSnapshot.")
		fs.PrintDefaults()
	}
	namespace := os.Getenv("SYSTEM_NAMESPACE")
	if namespace == "" {
		namespace = "sandbox-snapshot-system"
	}
	o := teardown.Options{Poll: time.Second}
	fs.StringVar(&o.Namespace, "namespace", namespace, "the controller's namespace; $SYSTEM_NAMESPACE when set")
	fs.StringVar(&o.Deployment, "deployment", "sandbox-snapshot-controller", "the controller's Deployment")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "how long to wait for the controller's pods to go")
	fs.StringVar(&o.SnapshotNamespace, "snapshot-namespace", "", "release the snapshots of this namespace only; empty: all")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "teardown: unexpected argument %q\n", fs.Arg(0))
		return 2
	case o.Timeout <= 0:
		fmt.Fprintf(stderr, "teardown: --timeout %s: must be positive\n", o.Timeout)
		return 2
	}
	// KUBECONFIG when set, else the pod's own ServiceAccount.
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintf(stderr, "teardown: %v\n", err)
		return 1
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "teardown: %v\n", err)
		return 1
	}
	snapshots, err := versioned.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "teardown: %v\n", err)
		return 1
	}
	res, err := teardown.Run(ctx, kube, snapshots, o)
	if res.Stopped {
		fmt.Fprintf(stdout, "teardown: Deployment %s/%s scaled to zero and its pods gone\n", o.Namespace, o.Deployment)
	}
	for _, s := range res.Released {
		fmt.Fprintf(stdout, "teardown: released SandboxSnapshot %s\n", s)
	}
	for _, s := range res.Unfinished {
		fmt.Fprintf(stdout, "teardown: SandboxSnapshot %s had not finished: its commit TaskRun, if it runs on, thaws the sandbox, but its status will not say how it ended\n", s)
	}
	if err != nil {
		fmt.Fprintf(stderr, "teardown: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "teardown: %d snapshots released\n", len(res.Released))
	return 0
}
