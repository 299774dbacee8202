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

// Package samples applies config/samples/ to the local cluster: the
// BatchSandbox demo, its pod demo-0 and (when the SandboxSnapshot CRD is
// installed) the snapshot demo-snap.
//
// Control-plane mode (test/cluster/cluster-up.sh) has no kubelet, so it also
// creates a fake Node node-0, binds the pod to it and writes a Running pod
// status with container IDs, so that the operator can resolve the pod and
// its node. Node mode (test/cluster/node-up.sh) runs the pod for real, and
// Apply waits until it is Ready.
package samples

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/manifests"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/localcluster"
)

const (
	// NodeName is the local cluster's one node (NODE_NAME in test/cluster/lib.sh).
	NodeName = "node-0"
	// bridgeIP is the node's address (BRIDGE_IP in test/cluster/lib.sh).
	bridgeIP = "10.88.0.1"
	// podIP is the fake pod's address, in the bridge's 10.88.0.0/24.
	podIP = "10.88.0.200"
	// fakeLabel marks the Node this package made, so that Delete removes only it.
	fakeLabel = "sandbox.opensandbox.io/fake-node"
	// fieldManager owns the fields Apply sets.
	fieldManager = "samples"
	// defaultRegistry stands in for the node's registry when none runs.
	defaultRegistry = "127.0.0.1:5000"

	podName   = "demo-0"
	namespace = "default"
)

// Samples applies and deletes config/samples/ on the local cluster.
type Samples struct {
	dirs    localcluster.Dirs
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	mapper  meta.RESTMapper
}

// New returns Samples for the local cluster of dirs, which must be up.
func New(ctx context.Context, dirs localcluster.Dirs) (*Samples, error) {
	cfg, kube, err := dirs.Up(ctx)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Samples{
		dirs:    dirs,
		kube:    kube,
		dynamic: dyn,
		mapper:  restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery())),
	}, nil
}

func (s *Samples) file(name string) string {
	return filepath.Join(s.dirs.Root, "config", "samples", name)
}

// Apply applies the samples, with demo-snap when withSnapshot is set.
func (s *Samples) Apply(ctx context.Context, withSnapshot bool) error {
	mode, err := s.dirs.Mode()
	if err != nil {
		return err
	}
	if _, err := s.apply(ctx, s.file("batchsandbox.yaml"), nil); err != nil {
		return err
	}
	pod := strings.NewReplacer("${LOCAL_REGISTRY}", s.registry())
	if mode == "node" {
		if _, err := s.apply(ctx, s.file("pod.yaml"), pod); err != nil {
			return err
		}
		if err := s.waitPod(ctx, 120*time.Second, "Ready", podReady); err != nil {
			return err
		}
		localcluster.Logf("pod %s/%s is Ready on the node", namespace, podName)
	} else {
		if err := s.fakeNode(ctx); err != nil {
			return err
		}
		if _, err := s.apply(ctx, s.file("pod.yaml"), pod); err != nil {
			return err
		}
		if err := s.fakeRunning(ctx); err != nil {
			return err
		}
	}
	if !withSnapshot {
		return nil
	}
	switch ok, err := s.apply(ctx, s.file("sandboxsnapshot.yaml"), nil); {
	case err != nil:
		return err
	case ok:
		localcluster.Logf("applied SandboxSnapshot %s/demo-snap", namespace)
	default:
		localcluster.Logf("SandboxSnapshot CRD not installed (config/ not applied yet); skipping demo-snap")
	}
	return nil
}

// registry returns the node's registry when it runs (test/cluster/node-up.sh),
// else a stand-in: the pod's image is then never pulled.
func (s *Samples) registry() string {
	if _, ok := s.dirs.Running("registry"); ok {
		if env, err := localcluster.ReadEnv(filepath.Join(s.dirs.Node, "registry.env")); err == nil && env["LOCAL_REGISTRY"] != "" {
			return env["LOCAL_REGISTRY"]
		}
	}
	return defaultRegistry
}

// objects reads the objects of a manifest, with its text replaced by r if set.
func objects(path string, r *strings.Replacer) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if r != nil {
		b = []byte(r.Replace(string(b)))
	}
	var objs []*unstructured.Unstructured
	docs, err := manifests.Split(b)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	for _, doc := range docs {
		obj := map[string]any{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", path, err)
		}
		if len(obj) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
	return objs, nil
}

// resource returns the client of obj's resource; ok is false when the
// cluster does not serve its kind.
func (s *Samples) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, bool, error) {
	gvk := obj.GroupVersionKind()
	m, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return s.dynamic.Resource(m.Resource).Namespace(obj.GetNamespace()), true, nil
	}
	return s.dynamic.Resource(m.Resource), true, nil
}

// apply applies the objects of a manifest (server-side); ok is false when
// the cluster does not serve a kind of them, and nothing was applied.
func (s *Samples) apply(ctx context.Context, path string, r *strings.Replacer) (ok bool, err error) {
	objs, err := objects(path, r)
	if err != nil {
		return false, err
	}
	for _, obj := range objs {
		res, ok, err := s.resource(obj)
		if err != nil || !ok {
			return false, err
		}
		if _, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return false, fmt.Errorf("applying %s %s from %s: %w", obj.GetKind(), obj.GetName(), path, err)
		}
	}
	return true, nil
}

// fakeNode creates node-0 with a Ready status; no kubelet is behind it.
func (s *Samples) fakeNode(ctx context.Context) error {
	nodes := s.kube.CoreV1().Nodes()
	_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: NodeName,
		Labels: map[string]string{
			corev1.LabelHostname: NodeName, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64", fakeLabel: "true",
		},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrs.IsAlreadyExists(err) {
		return fmt.Errorf("creating Node %s: %w", NodeName, err)
	}
	version, err := s.kube.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status = nodeStatus(version.GitVersion, metav1.Now())
		n, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		// Admission tainted the new node not-ready; no node controller runs here to lift it.
		if taints := readyTaints(n.Spec.Taints); len(taints) != len(n.Spec.Taints) {
			n.Spec.Taints = taints
			_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("making Node %s Ready: %w", NodeName, err)
	}
	localcluster.Logf("fake node %s is Ready", NodeName)
	return nil
}

// fakeRunning binds the pod to node-0 and writes a Running status for it.
func (s *Samples) fakeRunning(ctx context.Context) error {
	pods := s.kube.CoreV1().Pods(namespace)
	pod, err := pods.Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pod.Spec.NodeName == "" {
		// The scheduler may bind it first; the wait below accepts that.
		_ = pods.Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: podName},
			Target:     corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: NodeName},
		}, metav1.CreateOptions{})
	}
	if err := s.waitPod(ctx, 30*time.Second, "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" }); err != nil {
		return err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		running(pod, bridgeIP, metav1.Now())
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("writing the status of pod %s/%s: %w", namespace, podName, err)
	}
	localcluster.Logf("pod %s/%s faked Running on %s", namespace, podName, NodeName)
	return nil
}

// waitPod waits until the sample pod is what done says.
func (s *Samples) waitPod(ctx context.Context, timeout time.Duration, what string, done func(*corev1.Pod) bool) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := s.kube.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
		return err == nil && done(p), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s was not %s after %s: %w", namespace, podName, what, timeout, err)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Delete deletes the samples, and node-0 when Apply faked it.
func (s *Samples) Delete(ctx context.Context) error {
	fake := false
	if n, err := s.kube.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{}); err == nil {
		fake = n.Labels[fakeLabel] == "true"
	}
	// The operator's finalizer may keep demo-snap a while; that is no reason to stop.
	if err := s.delete(ctx, s.file("sandboxsnapshot.yaml"), 60*time.Second); err != nil {
		localcluster.Logf("%v", err)
	}
	pods := s.kube.CoreV1().Pods(namespace)
	// No kubelet confirms a graceful deletion on the fake node.
	grace := int64(1)
	if fake {
		grace = 0
	}
	if err := pods.Delete(ctx, podName, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrs.IsNotFound(err) {
		return fmt.Errorf("deleting pod %s/%s: %w", namespace, podName, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, podName, metav1.GetOptions{})
		return apierrs.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s still there after 60s: %w", namespace, podName, err)
	}
	if err := s.delete(ctx, s.file("batchsandbox.yaml"), 60*time.Second); err != nil {
		return err
	}
	if fake {
		if err := s.kube.CoreV1().Nodes().Delete(ctx, NodeName, metav1.DeleteOptions{}); err != nil && !apierrs.IsNotFound(err) {
			return fmt.Errorf("deleting Node %s: %w", NodeName, err)
		}
	}
	localcluster.Logf("samples deleted")
	return nil
}

// delete deletes the objects of a manifest and waits up to timeout until they are gone.
func (s *Samples) delete(ctx context.Context, path string, timeout time.Duration) error {
	objs, err := objects(path, nil)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		res, ok, err := s.resource(obj)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := res.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrs.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			_, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
			return apierrs.IsNotFound(err), nil
		})
		if err != nil {
			return fmt.Errorf("%s %s still there after %s: %w", obj.GetKind(), obj.GetName(), timeout, err)
		}
	}
	return nil
}
