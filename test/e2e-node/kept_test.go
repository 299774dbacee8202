//go:build e2e_node

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

package e2enode

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// TestKeptImageNeedsCredentials snapshots a sandbox into a registry that
// asks for credentials, with keep-local on a node whose kubelet verifies
// them (imagePullCredentialsVerificationPolicy: AlwaysVerify, what
// keep-local needs): a pod of another namespace, without pull secrets,
// naming the kept image by digest does not start from it, and the
// sandbox's own namespace, with the registry's credentials, resumes from it.
func TestKeptImageNeedsCredentials(t *testing.T) {
	host, pushSecret := privateRegistryAndSecret(t, "e2e-private")
	nodeframework.SetConfig(t, map[string]any{"registry": host + "/snapshots", "insecure-registry": "true", "push-secret": pushSecret.Name, "keep-local": "true"},
		`"registry":"`+host+`/snapshots"`)

	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSandbox(t, ns, "sb")
	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	ref := test.PinnedDigests(t, s)[0]
	ctx, is := nodeImages(t)
	if _, err := is.Get(ctx, ref.String()); err != nil {
		t.Fatalf("the node does not keep %s, so this test proves nothing: %v", ref, err)
	}

	// Another tenant names the kept image, with no credentials for it.
	other := nodeframework.NewNamespace(t)
	nodeframework.Run(t, podFrom(other, "intruder", ref.String(), ""), "kubectl", "apply", "-f", "-")
	var refusal string
	nodeframework.Eventually(t, "the kubelet to refuse pod "+other+"/intruder the kept image", 2*time.Minute, func() (bool, error) {
		pod, err := nodeframework.Clients().Kube.CoreV1().Pods(other).Get(t.Context(), "intruder", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.State.Running != nil || cs.State.Terminated != nil {
				return false, fmt.Errorf("pod %s/intruder started from %s, kept on the node for namespace %s, without credentials for it", other, ref, ns)
			}
			if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				refusal = w.Message
				return refusal != "", nil
			}
		}
		return false, nil
	})
	// containerd words the registry's 401 as "authorization failed".
	if low := strings.ToLower(refusal); !strings.Contains(low, "401") && !strings.Contains(low, "authoriz") {
		t.Fatalf("pod %s/intruder was refused for another reason than its credentials, so this test proves nothing: %s", other, refusal)
	}
	t.Logf("pod %s/intruder refused: %s", other, refusal)

	// The sandbox's own namespace resumes from it, with the credentials.
	pullSecret := pushSecret.DeepCopy()
	pullSecret.ObjectMeta = metav1.ObjectMeta{Name: "registry", Namespace: ns}
	if _, err := nodeframework.Clients().Kube.CoreV1().Secrets(ns).Create(t.Context(), pullSecret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeframework.Run(t, podFrom(ns, "resumed", ref.String(), pullSecret.Name), "kubectl", "apply", "-f", "-")
	nodeframework.Run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/resumed", "--timeout=2m")
}

// privateRegistryAndSecret serves a privateRegistry for user "tenant" with
// a password of its own and creates, in the operator's namespace for the
// test, the push Secret name with those credentials; it returns the
// registry's host:port and the Secret.
func privateRegistryAndSecret(t *testing.T, name string) (string, *corev1.Secret) {
	t.Helper()
	password := "pw-" + strings.TrimSpace(nodeframework.RandomMarker(t, name))
	host := privateRegistry(t, "tenant", password)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: test.SystemNamespace},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigFor(host, "tenant", password)},
	}
	if _, err := nodeframework.Clients().Kube.CoreV1().Secrets(test.SystemNamespace).Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = nodeframework.Clients().Kube.CoreV1().Secrets(test.SystemNamespace).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})
	return host, secret
}

// podFrom is a pod manifest running image, which the node may have, with
// pullSecret as its image pull secret unless it is empty.
func podFrom(ns, name, image, pullSecret string) string {
	secrets := ""
	if pullSecret != "" {
		secrets = fmt.Sprintf(`,"imagePullSecrets":[{"name":%q}]`, pullSecret)
	}
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q},"spec":{"terminationGracePeriodSeconds":1%s,"containers":[{"name":"app","image":%q,"imagePullPolicy":"IfNotPresent","command":["/bin/sh","-c","exec sleep 2147483647"]}]}}`,
		name, ns, secrets, image)
}

// dockerConfigFor is a .dockerconfigjson with user's credentials for host.
func dockerConfigFor(host, user, password string) []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	out, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"auth": auth}}})
	return out
}

// privateRegistry serves, on the node's bridge address, the node's registry
// behind a proxy that answers only user with password (HTTP basic auth, as
// a private registry does), tells the node's containerd to speak plain HTTP
// to it, and returns its host:port.
func privateRegistry(t *testing.T, user, password string) string {
	t.Helper()
	hostsDir := os.Getenv("CONTAINERD_HOSTS_DIR")
	if hostsDir == "" {
		t.Fatal("CONTAINERD_HOSTS_DIR is not set: source test/cluster/env.sh after test/cluster/node-up.sh")
	}
	bridge, _, err := net.SplitHostPort(nodeframework.LocalRegistry())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: nodeframework.LocalRegistry()})
	host := test.ListenAndServe(t, net.JoinHostPort(bridge, "0"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="e2e-private"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		r.Header.Del("Authorization")
		proxy.ServeHTTP(w, r)
	}))
	dir := filepath.Join(hostsDir, host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	hosts := fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n", host, host)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	return host
}
