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
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// layout is where the local cluster's scripts keep their state under the
// repository root (test/cluster/lib.sh).
type layout struct{ root string }

func (l layout) clusterDir() string { return filepath.Join(l.root, "_output", "cluster") }
func (l layout) benchDir() string   { return filepath.Join(l.root, "_output", "bench") }
func (l layout) pidFile(name string) string {
	return filepath.Join(l.clusterDir(), "pids", name+".pid")
}
func (l layout) logFile(name string) string {
	return filepath.Join(l.clusterDir(), "logs", name+".log")
}

// pid reads the pid that the scripts recorded for the daemon name.
func (l layout) pid(name string) (int, error) {
	b, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", l.pidFile(name), err)
	}
	return pid, nil
}

// withController starts this controller with test/cluster/run-controller.sh,
// runs fn with its pid, and stops it again, also when fn fails.
func withController(ctx context.Context, l layout, fn func(pid int) error) (err error) {
	script := filepath.Join(l.root, "test", "cluster", "run-controller.sh")
	runScript := func(ctx context.Context, verb string) error {
		cmd := exec.CommandContext(ctx, script, verb)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %w", script, verb, err)
		}
		return nil
	}
	defer func() {
		// Stopped even when ctx is cancelled: nothing else would stop it.
		err = errors.Join(err, runScript(context.WithoutCancel(ctx), "stop"))
	}()
	if err := runScript(ctx, "start"); err != nil {
		return err
	}
	pid, err := l.pid("controller-1")
	if err != nil {
		return err
	}
	return fn(pid)
}

// What OpenSandbox's controller runs as: its config/rbac ClusterRole, bound
// to a ServiceAccount of its own.
const (
	openSandboxNamespace      = "opensandbox-system"
	openSandboxServiceAccount = "opensandbox-controller"
	openSandboxClusterRole    = "opensandbox-manager-role"
	openSandboxTokenTTL       = 24 * time.Hour
)

// openSandboxController runs OpenSandbox's controller (its SandboxSnapshot,
// BatchSandbox and Pool controllers, built by test/cluster/opensandbox-build.sh)
// out of cluster: as its own ServiceAccount, with its default QPS and burst
// (100, 200) and leader election off. Its SandboxSnapshot reconciler makes
// a batch/v1 Job <snapshot>-commit per snapshot, whose pod
// kube-controller-manager's Job controller makes and kwok turns Running;
// bench opensandbox plays the kubelet from there (kubeletPart). Its
// BatchSandbox controller writes each sandbox's endpoints annotation and
// status once when it starts, before the warm-up, and nothing during the
// burst.
type openSandboxController struct {
	l          layout
	bin        string
	kubeconfig string
}

// installOpenSandbox builds OpenSandbox's controller and installs what it
// needs beside the cluster's SandboxSnapshot and BatchSandbox CRDs: its Pool
// CRD, its ServiceAccount bound to its ClusterRole, and a kubeconfig with
// that ServiceAccount's token.
func installOpenSandbox(ctx context.Context, c *clients, l layout, adminKubeconfig string) (*openSandboxController, error) {
	build := exec.CommandContext(ctx, filepath.Join(l.root, "test", "cluster", "opensandbox-build.sh"))
	build.Stderr = os.Stderr
	out, err := build.Output()
	if err != nil {
		return nil, fmt.Errorf("test/cluster/opensandbox-build.sh: %w", err)
	}
	osc := &openSandboxController{l: l, bin: strings.TrimSpace(string(out)),
		kubeconfig: filepath.Join(l.clusterDir(), "opensandbox.kubeconfig")}

	parent := filepath.Dir(l.root)
	crds := envOr("OPENSANDBOX_CRDS_DIR", filepath.Join(parent, "shared", "opensandbox", "crds"))
	src := envOr("OPENSANDBOX_SRC", filepath.Join(parent, "shared", "opensandbox", "src", "kubernetes"))
	if err := applyCRD(ctx, c, filepath.Join(crds, "sandbox.opensandbox.io_pools.yaml")); err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: openSandboxNamespace}}
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrs.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", openSandboxNamespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: openSandboxServiceAccount, Namespace: openSandboxNamespace}}
	if _, err := c.kube.CoreV1().ServiceAccounts(openSandboxNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrs.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", openSandboxNamespace, openSandboxServiceAccount, err)
	}
	if err := applyClusterRole(ctx, c, filepath.Join(src, "config", "rbac", "role.yaml")); err != nil {
		return nil, err
	}
	if err := applyClusterRoleBinding(ctx, c); err != nil {
		return nil, err
	}
	tr, err := c.kube.CoreV1().ServiceAccounts(openSandboxNamespace).CreateToken(ctx, openSandboxServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(openSandboxTokenTTL.Seconds()))}},
		metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token of ServiceAccount %s/%s: %w", openSandboxNamespace, openSandboxServiceAccount, err)
	}
	user := "system:serviceaccount:" + openSandboxNamespace + ":" + openSandboxServiceAccount
	if err := writeTokenKubeconfig(adminKubeconfig, osc.kubeconfig, user, openSandboxNamespace, tr.Status.Token); err != nil {
		return nil, err
	}
	return osc, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// applyCRD creates or updates the CRD in file and waits until it is established.
func applyCRD(ctx context.Context, c *clients, file string) error {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := readYAML(file, crd); err != nil {
		return err
	}
	crds := c.apiextensions.ApiextensionsV1().CustomResourceDefinitions()
	cur, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
	switch {
	case apierrs.IsNotFound(err):
		_, err = crds.Create(ctx, crd, metav1.CreateOptions{})
	case err == nil:
		cur.Spec = crd.Spec
		_, err = crds.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("CRD %s from %s: %w", crd.Name, file, err)
	}
	return poll(ctx, time.Minute, func() (bool, error) {
		cur, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range cur.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// applyClusterRole creates or updates OpenSandbox's ClusterRole from its
// role.yaml, renamed from its generic manager-role.
func applyClusterRole(ctx context.Context, c *clients, file string) error {
	role := &rbacv1.ClusterRole{}
	if err := readYAML(file, role); err != nil {
		return err
	}
	role.ObjectMeta = metav1.ObjectMeta{Name: openSandboxClusterRole}
	roles := c.kube.RbacV1().ClusterRoles()
	cur, err := roles.Get(ctx, role.Name, metav1.GetOptions{})
	switch {
	case apierrs.IsNotFound(err):
		_, err = roles.Create(ctx, role, metav1.CreateOptions{})
	case err == nil:
		cur.Rules = role.Rules
		_, err = roles.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("ClusterRole %s from %s: %w", role.Name, file, err)
	}
	return nil
}

// applyClusterRoleBinding binds OpenSandbox's ClusterRole to its ServiceAccount.
func applyClusterRoleBinding(ctx context.Context, c *clients) error {
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: openSandboxClusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: openSandboxClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: openSandboxNamespace, Name: openSandboxServiceAccount}},
	}
	bindings := c.kube.RbacV1().ClusterRoleBindings()
	cur, err := bindings.Get(ctx, binding.Name, metav1.GetOptions{})
	switch {
	case apierrs.IsNotFound(err):
		_, err = bindings.Create(ctx, binding, metav1.CreateOptions{})
	case err == nil:
		cur.Subjects = binding.Subjects
		_, err = bindings.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("ClusterRoleBinding %s: %w", binding.Name, err)
	}
	return nil
}

func readYAML(file string, into any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// writeTokenKubeconfig writes to file, readable only by its owner, a
// kubeconfig for the admin kubeconfig's API server whose user authenticates
// with token alone (no client certificate: not admin).
func writeTokenKubeconfig(adminKubeconfig, file, user, namespace, token string) error {
	admin, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		return err
	}
	adminContext := admin.Contexts[admin.CurrentContext]
	if adminContext == nil || admin.Clusters[adminContext.Cluster] == nil {
		return fmt.Errorf("%s: no cluster in its current context %q", adminKubeconfig, admin.CurrentContext)
	}
	const name = "sso-local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = admin.Clusters[adminContext.Cluster]
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = name
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// openSandboxWorkers is the line OpenSandbox's controller logs once its
// SandboxSnapshot controller runs its workers.
var openSandboxWorkers = regexp.MustCompile(`"msg":"Starting workers".*"controller":"sandboxsnapshot"`)

// with starts OpenSandbox's controller, waits until its SandboxSnapshot
// controller runs, runs fn with its pid, and stops it again, also when fn
// fails. Its log is appended to _output/cluster/logs/opensandbox.log.
func (osc *openSandboxController) with(ctx context.Context, fn func(pid int) error) (err error) {
	const name = "opensandbox"
	port, err := freePort()
	if err != nil {
		return err
	}
	registry := envOr("CONTROLLER_REGISTRY", "127.0.0.1:5000/snapshots")
	d, err := startDaemon(osc.l, name, []string{"POD_NAMESPACE=" + openSandboxNamespace}, osc.bin,
		"--kubeconfig", osc.kubeconfig,
		"--snapshot-registry", registry, "--snapshot-registry-insecure",
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--metrics-bind-address", "0", "--leader-elect=false")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.stop()) }()
	if err := d.waitLog(ctx, time.Minute, openSandboxWorkers.Match); err != nil {
		return fmt.Errorf("OpenSandbox's SandboxSnapshot controller: %w", err)
	}
	return fn(d.cmd.Process.Pid)
}

// freePort is a TCP port of 127.0.0.1 that nothing listens on.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// daemon is a process started the way test/cluster/lib.sh's start_daemon
// starts one: in a session of its own, its output appended to its log, its
// pid recorded, so that the script's stop_daemon stops it if bench cannot.
type daemon struct {
	name, log, pidFile string
	// logFrom is the log's size when the process started: what it logs
	// comes after.
	logFrom int64
	cmd     *exec.Cmd
	exited  chan struct{}
}

func startDaemon(l layout, name string, env []string, args ...string) (*daemon, error) {
	d := &daemon{name: name, log: l.logFile(name), pidFile: l.pidFile(name), exited: make(chan struct{})}
	if pid, err := l.pid(name); err == nil && syscall.Kill(pid, 0) == nil {
		return nil, fmt.Errorf("%s already runs (pid %d)", name, pid)
	}
	for _, dir := range []string{filepath.Dir(d.log), filepath.Dir(d.pidFile)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	out, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the process holds its own copy
	st, err := out.Stat()
	if err != nil {
		return nil, err
	}
	d.logFrom = st.Size()
	d.cmd = exec.Command(args[0], args[1:]...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = out, out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	if err := os.WriteFile(d.pidFile, []byte(strconv.Itoa(d.cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return nil, errors.Join(err, d.stop())
	}
	logf("started %s (pid %d), log %s", name, d.cmd.Process.Pid, d.log)
	return d, nil
}

// waitLog waits until match finds what the process logged since it
// started, failing early if it exits.
func (d *daemon) waitLog(ctx context.Context, timeout time.Duration, match func([]byte) bool) error {
	deadline := time.After(timeout)
	for {
		logged, err := d.logged()
		if err != nil {
			return err
		}
		if match(logged) {
			return nil
		}
		select {
		case <-d.exited:
			logged, _ = d.logged() // its last words
			return fmt.Errorf("%s exited; the end of its log:\n%s", d.name, lastLines(logged, 30))
		case <-deadline:
			return fmt.Errorf("not running after %s; the end of %s's log:\n%s", timeout, d.name, lastLines(logged, 30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// logged is what the process logged since it started.
func (d *daemon) logged() ([]byte, error) {
	f, err := os.Open(d.log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(d.logFrom, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// stop sends the process TERM, and KILL if it still runs 10 s later.
func (d *daemon) stop() error {
	defer os.Remove(d.pidFile)
	pid := d.cmd.Process.Pid
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s (pid %d): %w", d.name, pid, err)
	}
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		logf("%s (pid %d) ignored TERM; killing", d.name, pid)
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	logf("stopped %s (pid %d)", d.name, pid)
	return nil
}

// lastLines is the last n lines of b.
func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}
