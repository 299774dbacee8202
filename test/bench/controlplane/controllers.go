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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/localcluster"
)

// withController starts this controller with test/cluster/run-controller.sh,
// runs fn with its pid, and stops it again, also when fn fails.
func withController(ctx context.Context, l localcluster.Dirs, fn func(pid int) error) (err error) {
	script := filepath.Join(l.Root, "test", "cluster", "run-controller.sh")
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
	pid, err := runningPID(l, "controller-1")
	if err != nil {
		return err
	}
	return fn(pid)
}

// runningPID is the pid of the local cluster's daemon name, which must run.
func runningPID(l localcluster.Dirs, name string) (int, error) {
	pid, ok := l.Running(name)
	if !ok {
		return 0, fmt.Errorf("%s does not run (no live pid in %s)", name, l.PIDFile(name))
	}
	return pid, nil
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
	l          localcluster.Dirs
	bin        string
	kubeconfig string
}

// installOpenSandbox builds OpenSandbox's controller and installs what it
// needs beside the cluster's SandboxSnapshot and BatchSandbox CRDs: its Pool
// CRD, its ServiceAccount bound to its ClusterRole, and a kubeconfig with
// that ServiceAccount's token.
func installOpenSandbox(ctx context.Context, c *clients, l localcluster.Dirs, adminKubeconfig string) (*openSandboxController, error) {
	build := exec.CommandContext(ctx, filepath.Join(l.Root, "test", "cluster", "opensandbox-build.sh"))
	build.Stderr = os.Stderr
	out, err := build.Output()
	if err != nil {
		return nil, fmt.Errorf("test/cluster/opensandbox-build.sh: %w", err)
	}
	osc := &openSandboxController{l: l, bin: strings.TrimSpace(string(out)),
		kubeconfig: filepath.Join(l.Cluster, "opensandbox.kubeconfig")}

	parent := filepath.Dir(l.Root)
	crds := localcluster.Getenv("OPENSANDBOX_CRDS_DIR", filepath.Join(parent, "shared", "opensandbox", "crds"))
	src := localcluster.Getenv("OPENSANDBOX_SRC", filepath.Join(parent, "shared", "opensandbox", "src", "kubernetes"))
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
	admin, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig)
	if err != nil {
		return nil, err
	}
	if err := localcluster.WriteTokenKubeconfig(ctx, c.kube, admin, openSandboxNamespace, openSandboxServiceAccount, openSandboxTokenTTL, osc.kubeconfig); err != nil {
		return nil, err
	}
	return osc, nil
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

// openSandboxWorkers is the line OpenSandbox's controller logs once its
// SandboxSnapshot controller runs its workers.
var openSandboxWorkers = regexp.MustCompile(`"msg":"Starting workers".*"controller":"sandboxsnapshot"`)

// with starts OpenSandbox's controller, waits until its SandboxSnapshot
// controller runs, runs fn with its pid, and stops it again, also when fn
// fails. Its log is appended to _output/cluster/logs/opensandbox.log.
func (osc *openSandboxController) with(ctx context.Context, fn func(pid int) error) (err error) {
	const name = "opensandbox"
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		return err
	}
	registry := localcluster.Getenv("CONTROLLER_REGISTRY", "127.0.0.1:5000/snapshots")
	cmd := exec.Command(osc.bin,
		"--kubeconfig", osc.kubeconfig,
		"--snapshot-registry", registry, "--snapshot-registry-insecure",
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--metrics-bind-address", "0", "--leader-elect=false")
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+openSandboxNamespace)
	d, err := osc.l.Start(name, cmd)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Stop()) }()
	if err := d.WaitLog(ctx, time.Minute, openSandboxWorkers.Match); err != nil {
		return fmt.Errorf("OpenSandbox's SandboxSnapshot controller: %w", err)
	}
	return fn(d.PID())
}
