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

package framework

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
)

var (
	// repoRoot is the repository, found from the test's working directory.
	repoRoot string
	// kubeconfig is the admin kubeconfig: $KUBECONFIG, else the local cluster's.
	kubeconfig string
	// clients are built from kubeconfig in Init.
	clients *test.Clients
)

// RepoRoot is the repository, found by Init from the test's working directory.
func RepoRoot() string { return repoRoot }

// Kubeconfig is the admin kubeconfig's path: $KUBECONFIG, else the local cluster's.
func Kubeconfig() string { return kubeconfig }

// Clients are the admin clients Init built from the kubeconfig.
func Clients() *test.Clients { return clients }

// Init finds the repository and the cluster, builds Clients and checks that a controller runs.
func Init() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	for repoRoot = wd; ; repoRoot = filepath.Dir(repoRoot) {
		if _, err := os.Stat(filepath.Join(repoRoot, "go.mod")); err == nil {
			break
		}
		if filepath.Dir(repoRoot) == repoRoot {
			return fmt.Errorf("no go.mod above %s", wd)
		}
	}
	kubeconfig = os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		kubeconfig = filepath.Join(repoRoot, "_output", "cluster", "kubeconfig")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("no cluster (run test/e2e.sh, or test/cluster/cluster-up.sh and test/cluster/run-controller.sh start): %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	if clients, err = test.NewClients(cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := clients.Kube.CoreV1().Namespaces().Get(ctx, test.SystemNamespace, metav1GetOptions); err != nil {
		return fmt.Errorf("namespace %s (is config/ applied?): %w", test.SystemNamespace, err)
	}
	if len(ControllerPIDs()) == 0 {
		return fmt.Errorf("no controller runs: start one with test/cluster/run-controller.sh start")
	}
	return nil
}

// Cleanups that must also run when the tests are interrupted (SIGINT, SIGTERM):
// t.Cleanup does not run then.
var interrupt struct {
	sync.Mutex
	next  int
	funcs map[int]func()
}

// onInterrupt registers f to run on an interrupt; the returned func
// unregisters it once the regular cleanup has run.
func onInterrupt(f func()) (unregister func()) {
	interrupt.Lock()
	defer interrupt.Unlock()
	if interrupt.funcs == nil {
		interrupt.funcs = map[int]func(){}
	}
	id := interrupt.next
	interrupt.next++
	interrupt.funcs[id] = f
	return func() {
		interrupt.Lock()
		defer interrupt.Unlock()
		delete(interrupt.funcs, id)
	}
}

// HandleInterrupts runs the Cleanup funcs, newest first, on SIGINT or SIGTERM, then exits 1.
func HandleInterrupts() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-c
		fmt.Fprintf(os.Stderr, "e2e: %v: cleaning up\n", sig)
		interrupt.Lock()
		defer interrupt.Unlock()
		for id := interrupt.next - 1; id >= 0; id-- {
			if f, ok := interrupt.funcs[id]; ok {
				f()
			}
		}
		os.Exit(1)
	}()
}

// Cleanup registers f with t.Cleanup and as an interrupt cleanup.
func Cleanup(t *testing.T, f func()) {
	t.Helper()
	unregister := onInterrupt(f)
	t.Cleanup(func() {
		unregister()
		f()
	})
}
