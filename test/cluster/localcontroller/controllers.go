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
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/localcluster"
)

const (
	// startTimeout bounds the wait for "Starting controllers".
	startTimeout = 120 * time.Second
	// stopTimeout is how long a stopped process gets before SIGKILL.
	stopTimeout = 10 * time.Second
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
	if err := c.writeKubeconfig(ctx, cfg, kube, dep, kubeconfig); err != nil {
		return err
	}

	podEnv, err := Env(dep, dep.Name+"-local-"+strconv.Itoa(n))
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	pprofPort, metricsPort := ports[0], ports[1]
	if err := os.MkdirAll(c.Dirs.PIDs, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dirs.Logs, 0o755); err != nil {
		return err
	}
	logPath := c.Dirs.LogFile(name)
	offset := int64(0)
	if st, err := os.Stat(logPath); err == nil {
		offset = st.Size()
	}
	state := fmt.Sprintf("PROFILING_PORT=%d\nMETRICS_PROMETHEUS_PORT=%d\nLOG_OFFSET=%d\n", pprofPort, metricsPort, offset)
	if err := os.WriteFile(c.envFile(n), []byte(state), 0o644); err != nil {
		return err
	}

	env := append(append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + getenv("HOME", "/root"),
		"TMPDIR=" + getenv("TMPDIR", "/tmp"),
		"KUBECONFIG=" + kubeconfig,
	}, podEnv...),
		"PROFILING_PORT="+strconv.Itoa(pprofPort),
		"METRICS_PROMETHEUS_PORT="+strconv.Itoa(metricsPort),
		"METRICS_PROMETHEUS_HOST=127.0.0.1",
	)
	ctl := exec.Command(c.bin(), "--kubeconfig", kubeconfig)
	ctl.Env = env
	exited, err := c.startDaemon(name, ctl)
	if err != nil {
		return err
	}
	cpid := ctl.Process.Pid
	apiPID := c.Dirs.PID("kube-apiserver")
	args := append(append([]string{}, c.WatchdogCommand[1:]...), strconv.Itoa(n), strconv.Itoa(cpid), strconv.Itoa(apiPID))
	if _, err := c.startDaemon(watchdogName(n), exec.Command(c.WatchdogCommand[0], args...)); err != nil {
		return err
	}

	if err := waitReady(logPath, offset, exited); err != nil {
		return fmt.Errorf("%s: %w", name, err)
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

// writeKubeconfig mints a token of the Deployment's ServiceAccount and
// writes a kubeconfig holding it (no client certificate: not admin).
func (c *Controllers) writeKubeconfig(ctx context.Context, admin *rest.Config, kube kubernetes.Interface, dep *appsv1.Deployment, path string) error {
	ns, sa := dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName
	secs := int64(c.TokenDuration.Seconds())
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of ServiceAccount %s/%s: %w", ns, sa, err)
	}
	user := "system:serviceaccount:" + ns + ":" + sa
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sso-local"] = &clientcmdapi.Cluster{
		Server:                   admin.Host,
		CertificateAuthority:     admin.CAFile,
		CertificateAuthorityData: admin.CAData,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["sso-local"] = &clientcmdapi.Context{Cluster: "sso-local", AuthInfo: user, Namespace: ns}
	cfg.CurrentContext = "sso-local"
	// WriteToFile writes with mode 0600: the token is a credential.
	return clientcmd.WriteToFile(*cfg, path)
}

// startDaemon starts cmd in its own session, its output appended to its
// log, and records its pid. The returned channel closes when it exits while
// this process still runs.
func (c *Controllers) startDaemon(name string, cmd *exec.Cmd) (<-chan struct{}, error) {
	log, err := os.OpenFile(c.Dirs.LogFile(name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(c.Dirs.PIDFile(name), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	// Waiting reaps it should it exit early: a zombie would still look alive.
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	rel, _ := filepath.Rel(c.Dirs.Root, c.Dirs.LogFile(name))
	localcluster.Logf("started %s (pid %d), log %s", name, pid, rel)
	return exited, nil
}

// waitReady waits until the log, from offset on, says the controllers run.
func waitReady(logPath string, offset int64, exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if b, err := readFrom(logPath, offset); err == nil && bytes.Contains(b, []byte(ready)) {
			return nil
		}
		select {
		case <-exited:
			tail(logPath)
			return errors.New("exited")
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tail(logPath)
			return fmt.Errorf("timed out after %s waiting for %q in %s", startTimeout, ready, logPath)
		}
	}
}

// readFrom returns the file at path from offset on.
func readFrom(path string, offset int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

// tail copies the last 30 lines of a log to stderr, to explain a failure.
func tail(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > 31 {
		lines = lines[len(lines)-31:]
	}
	fmt.Fprint(os.Stderr, strings.Join(lines, ""))
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
	c.stopDaemons(names...)
}

// stopDaemons sends SIGTERM to every recorded daemon of names, removes
// their pid files, and kills those that still run after stopTimeout.
func (c *Controllers) stopDaemons(names ...string) {
	type daemon struct {
		name string
		pid  int
	}
	var stopping []daemon
	for _, name := range names {
		if pid, ok := c.Dirs.Running(name); ok {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			stopping = append(stopping, daemon{name, pid})
		}
		_ = os.Remove(c.Dirs.PIDFile(name))
	}
	for _, d := range stopping {
		if !waitGone(d.pid, stopTimeout) {
			localcluster.Logf("%s (pid %d) ignored TERM; killing", d.name, d.pid)
			_ = syscall.Kill(d.pid, syscall.SIGKILL)
		}
		localcluster.Logf("stopped %s (pid %d)", d.name, d.pid)
	}
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
		c.stopDaemons(watchdogName(n))
		if pid, ok := c.Dirs.Running(name); ok {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !waitGone(pid, stopTimeout) {
				return fmt.Errorf("%s (pid %d) survived SIGKILL", name, pid)
			}
			localcluster.Logf("killed %s (pid %d) with SIGKILL", name, pid)
		}
		_ = os.Remove(c.Dirs.PIDFile(name))
	}
	return nil
}

// waitGone waits up to d for process pid to exit.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for localcluster.Alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return true
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
			if !waitGone(cpid, stopTimeout) {
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

// freePorts returns n distinct TCP ports that nothing listens on, below the
// ephemeral range (32768+) so that no outgoing connection takes one meanwhile.
func freePorts(n int) ([]int, error) {
	var ports []int
	taken := map[int]bool{}
	for i := 0; i < 200 && len(ports) < n; i++ {
		p := 20000 + rand.IntN(12000)
		if taken[p] {
			continue
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		taken[p] = true
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, errors.New("no free port found")
	}
	return ports, nil
}

func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
