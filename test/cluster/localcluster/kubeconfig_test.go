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

package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
)

func TestWriteTokenKubeconfig(t *testing.T) {
	kube := fake.NewSimpleClientset()
	var asked *authenticationv1.TokenRequest
	kube.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateAction)
		if ca.GetSubresource() != "token" || ca.GetNamespace() != "ns" {
			return false, nil, nil
		}
		asked = ca.GetObject().(*authenticationv1.TokenRequest)
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "tok"}}, nil
	})
	dir := t.TempDir()
	out := filepath.Join(dir, "sa.kubeconfig")
	// An earlier, readable file must not keep its mode.
	if err := os.WriteFile(out, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	admin := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{
		CAFile: ca, CertFile: "/pki/admin.crt", KeyFile: "/pki/admin.key"}}
	if err := WriteTokenKubeconfig(context.Background(), kube, admin, "ns", "sa", time.Hour, out); err != nil {
		t.Fatal(err)
	}
	if asked == nil || asked.Spec.ExpirationSeconds == nil || *asked.Spec.ExpirationSeconds != 3600 {
		t.Errorf("token request %+v, want one for 3600 s", asked)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600: it holds a token", st.Mode().Perm())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", out)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != admin.Host || cfg.CAFile != admin.CAFile || cfg.BearerToken != "tok" || cfg.CertFile != "" || cfg.KeyFile != "" {
		t.Errorf("config: host %q, CA %q, token %q, cert %q, key %q; want the admin's server and CA, the token, no client certificate",
			cfg.Host, cfg.CAFile, cfg.BearerToken, cfg.CertFile, cfg.KeyFile)
	}
	raw, err := clientcmd.LoadFromFile(out)
	if err != nil {
		t.Fatal(err)
	}
	c := raw.Contexts[raw.CurrentContext]
	if c.Namespace != "ns" || c.AuthInfo != "system:serviceaccount:ns:sa" {
		t.Errorf("context %+v, want namespace ns and user system:serviceaccount:ns:sa", c)
	}
}
