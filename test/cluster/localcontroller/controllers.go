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

package localcontroller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/localcluster"
)

const (
	// startTimeout bounds the wait for "Starting controllers".
	startTimeout = 120 * time.Second
	// ready is what sharedmain logs once the informers have synced.
	ready = "Starting controllers"
	// configSnapshot is the operator's ConfigMap that holds the registry.
	configSnapshot = "config-snapshot"
)

// Controllers starts, stops and reports the local controller instances.
type Controllers struct {
	// Dirs is the repository and its local cluster.
	Dirs localcluster.Dirs
	// Registry goes into config-snapshot's registry key when that is empty;
	// empty leaves config-snapshot alone.
	Registry string
	// TokenDuration is how long the ServiceAccount token is valid.
	TokenDuration time.Duration
	// SkipBuild runs _output/bin/controller as it is, when it exists.
	SkipBuild bool
	// WatchdogCommand is the command (with leading arguments) that runs
	// Watchdog; Start appends the instance, the controller's pid and the API
	// server's.
	WatchdogCommand []string
}

// Name is instance n's name, that of its pid, log and env files.
func Name(n int) string { return fmt.Sprintf("controller-%d", n) }

func watchdogName(n int) string { return Name(n) + "-watchdog" }

func (c *Controllers) envFile(n int) string {
	return filepath.Join(c.Dirs.Cluster, Name(n)+".env")
}

func (c *Controllers) bin() string { return filepath.Join(c.Dirs.Root, "_output", "bin", "controller") }

// deployment reads the controller's Deployment from config/.
func (c *Controllers) deployment() (*appsv1.Deployment, error) {
	d, err := ReadDeployment(filepath.Join(c.Dirs.Root, "config", "500-controller.yaml"))
	if err != nil {
		return nil, err
	}
	if d.Spec.Template.Spec.ServiceAccountName == "" {
		return nil, fmt.Errorf("Deployment %s has no serviceAccountName", d.Name)
	}
	return d, nil
}

// Instances returns the numbers of the instances that have a pid file.
func (c *Controllers) Instances() []int {
	files, _ := filepath.Glob(filepath.Join(c.Dirs.PIDs, "controller-*.pid"))
	var ns []int
	for _, f := range files {
		s := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "controller-"), ".pid")
		if n, err := parseInstance(s); err == nil {
			ns = append(ns, n)
		}
	}
	sort.Ints(ns)
	return ns
}

// Start builds the controller if needed, starts instance n with its
// watchdog, and waits until it runs its controllers.
func (c *Controllers) Start(ctx context.Context, n int) error {
	name := Name(n)
	if pid, ok := c.Dirs.Running(name); ok {
		return fmt.Errorf("%s already runs (pid %d); use restart", name, pid)
	}
	cfg, kube, err := c.Dirs.Up(ctx)
	if err != nil {
		return err
	}
	dep, err := c.deployment()
	if err != nil {
		return err
	}
	if err := c.checkCluster(ctx, kube, dep); err != nil {
		return err
	}
	if err := c.build(); err != nil {
		return err
	}
	if err := c.ensureRegistry(ctx, kube, dep.Namespace); err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.Dirs.Cluster, "controller.kubeconfig")
	if err := localcluster.WriteTokenKubeconfig(ctx, kube, cfg, dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName, c.TokenDuration, kubeconfig); err != nil {
		return err
	}

	podEnv, err := Env(dep, dep.Name+"-local-"+strconv.Itoa(n))
	if err != nil {
		return err
	}
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		return err
	}
	pprofPort, metricsPort := ports[0], ports[1]
	env := append(append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + localcluster.Getenv("HOME", "/root"),
		"TMPDIR=" + localcluster.Getenv("TMPDIR", "/tmp"),
		"KUBECONFIG=" + kubeconfig,
	}, podEnv...),
		"PROFILING_PORT="+strconv.Itoa(pprofPort),
		"METRICS_PROMETHEUS_PORT="+strconv.Itoa(metricsPort),
		"METRICS_PROMETHEUS_HOST=127.0.0.1",
	)
	cmd := exec.Command(c.bin(), "--kubeconfig", kubeconfig)
	cmd.Env = env
	// A watchdog of a run that just crashed may not have noticed yet.
	c.Dirs.StopDaemons(watchdogName(n))
	ctl, err := c.Dirs.Start(name, cmd)
	if err != nil {
		return err
	}
	cpid := ctl.PID()
	// status reads the ports and where this run's log begins.
	state := fmt.Sprintf("PROFILING_PORT=%d\nMETRICS_PROMETHEUS_PORT=%d\nLOG_OFFSET=%d\n", pprofPort, metricsPort, ctl.LogFrom())
	if err := os.WriteFile(c.envFile(n), []byte(state), 0o644); err != nil {
		return errors.Join(err, ctl.Stop())
	}
	apiPID := c.Dirs.PID("kube-apiserver")
	args := append(append([]string{}, c.WatchdogCommand[1:]...), strconv.Itoa(n), strconv.Itoa(cpid), strconv.Itoa(apiPID))
	if _, err := c.Dirs.Start(watchdogName(n), exec.Command(c.WatchdogCommand[0], args...)); err != nil {
		return errors.Join(err, ctl.Stop())
	}
	if err := ctl.WaitLog(ctx, startTimeout, func(b []byte) bool { return bytes.Contains(b, []byte(ready)) }); err != nil {
		return err
	}
	localcluster.Logf("%s runs (pid %d) as system:serviceaccount:%s:%s; metrics 127.0.0.1:%d, pprof :%d%s",
		name, cpid, dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName, metricsPort, pprofPort, probesNote(cpid, 3*time.Second))
	return nil
}

// checkCluster refuses a cluster where the operator's Deployment runs, or
// where config/ is not applied.
func (c *Controllers) checkCluster(ctx context.Context, kube kubernetes.Interface, dep *appsv1.Deployment) error {
	ns, sa := dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName
	d, err := kube.AppsV1().Deployments(ns).Get(ctx, dep.Name, metav1.GetOptions{})
	switch {
	case err == nil && (d.Spec.Replicas == nil || *d.Spec.Replicas != 0):
		return fmt.Errorf("the operator already runs in the cluster (deployment %s/%s); "+
			"scale it to 0 before running a local controller next to it", ns, d.Name)
	case err != nil && !apierrs.IsNotFound(err):
		return fmt.Errorf("deployment %s/%s: %w", ns, dep.Name, err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("ServiceAccount %s/%s (is config/ applied by test/cluster/cluster-up.sh?): %w", ns, sa, err)
	}
	return nil
}

// build brings _output/bin/controller up to date with go build, which
// relinks only what changed: a restart stays fast.
func (c *Controllers) build() error {
	bin := c.bin()
	if _, err := os.Stat(bin); c.SkipBuild && err == nil {
		return nil
	}
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/controller")
	cmd.Dir = c.Dirs.Root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/controller: %w", err)
	}
	localcluster.Logf("go build ./cmd/controller: %s", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// ensureRegistry sets config-snapshot's registry when it is empty.
func (c *Controllers) ensureRegistry(ctx context.Context, kube kubernetes.Interface, ns string) error {
	if c.Registry == "" {
		return nil
	}
	cms := kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, configSnapshot, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s (is config/ applied?): %w", ns, configSnapshot, err)
	}
	if cm.Data["registry"] != "" {
		return nil
	}
	patch := fmt.Sprintf(`{"data":{"registry":%q}}`, c.Registry)
	if _, err := cms.Patch(ctx, configSnapshot, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting the registry of ConfigMap %s/%s: %w", ns, configSnapshot, err)
	}
	localcluster.Logf("config-snapshot: registry set to %s", c.Registry)
	return nil
}

// Stop stops instance n, or every instance when n is 0: SIGTERM, then
// SIGKILL after 10 s.
func (c *Controllers) Stop(n int) {
	ns := []int{n}
	if n == 0 {
		ns = c.Instances()
	}
	if len(ns) == 0 {
		localcluster.Logf("no controller runs")
		return
	}
	var names []string
	for _, n := range ns {
		names = append(names, watchdogName(n), Name(n))
	}
	c.Dirs.StopDaemons(names...)
}

// Kill kills instance n, or every instance when n is 0, with SIGKILL, as a
// crash would.
func (c *Controllers) Kill(n int) error {
	ns := []int{n}
	if n == 0 {
		ns = c.Instances()
	}
	if len(ns) == 0 {
		localcluster.Logf("no controller runs")
		return nil
	}
	for _, n := range ns {
		name := Name(n)
		// Its watchdog goes first, or it would remove the pid file of a new start.
		c.Dirs.StopDaemons(watchdogName(n))
		if pid, ok := c.Dirs.Running(name); ok {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !localcluster.WaitGone(pid, localcluster.StopTimeout) {
				return fmt.Errorf("%s (pid %d) survived SIGKILL", name, pid)
			}
			localcluster.Logf("killed %s (pid %d) with SIGKILL", name, pid)
		}
		_ = os.Remove(c.Dirs.PIDFile(name))
	}
	return nil
}

// Watchdog stops instance n (pid cpid) once the API server apiPID is being
// stopped (stop_daemon in test/cluster/lib.sh removes its pid file as it
// sends SIGTERM) or has exited: cluster-down.sh does not know about local
// controllers, and stopping now lets the API server shut down without their
// watches. It then removes the pid files, if they are still this run's.
func (c *Controllers) Watchdog(n, cpid, apiPID int) {
	name := Name(n)
	for localcluster.Alive(cpid) {
		if !localcluster.Alive(apiPID) || c.Dirs.PID("kube-apiserver") != apiPID {
			_ = syscall.Kill(cpid, syscall.SIGTERM)
			if !localcluster.WaitGone(cpid, localcluster.StopTimeout) {
				_ = syscall.Kill(cpid, syscall.SIGKILL)
			}
			break
		}
		time.Sleep(time.Second)
	}
	// Only our own records: a restart may have written new ones meanwhile.
	if c.Dirs.PID(name) == cpid {
		_ = os.Remove(c.Dirs.PIDFile(name))
	}
	if c.Dirs.PID(watchdogName(n)) == os.Getpid() {
		_ = os.Remove(c.Dirs.PIDFile(watchdogName(n)))
	}
}
