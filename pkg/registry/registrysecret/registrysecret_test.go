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

package registrysecret

import (
	"context"
	"encoding/pem"
	"net/http/httptest"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"

	"strings"
	"testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakekube "k8s.io/client-go/kubernetes/fake"
)

// TestRemoteReadsTheSecret checks that the client is built from the named
// Secret, and that a missing or mistyped one is an error naming it.
func TestRemoteReadsTheSecret(t *testing.T) {
	kube := fakekube.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "delete"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.test":{"auth":"dTpw"}}}`)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "opaque"}, Type: corev1.SecretTypeOpaque},
	)
	for secret, want := range map[string]string{
		"delete":  "",
		"missing": `getting registry Secret sys/missing`,
		"opaque":  `registry Secret sys/opaque is of type "Opaque"`,
	} {
		_, err := Remote(kube, "sys")(context.Background(), registry.Access{Secret: secret})
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Remote(%q) = %v, want %q", secret, err, want)
		}
	}
}

// TestRemoteTrustsTheCAConfigMap: a registry whose certificate a private CA
// signed answers a client built with that CA's ConfigMap and refuses one
// without it; a ConfigMap that is missing, or holds no certificate, is an
// error naming it.
func TestRemoteTrustsTheCAConfigMap(t *testing.T) {
	s := httptest.NewTLSServer(ggcrregistry.New())
	defer s.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
	kube := fakekube.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "corp-ca"}, Data: map[string]string{"ca.crt": ca}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "empty-ca"}, Data: map[string]string{"ca.crt": "none"}},
	)
	ref, err := name.ParseReference(strings.TrimPrefix(s.URL, "https://")+"/a/b:missing", name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		access   registry.Access
		want     string
		clientOK bool
	}{
		{registry.Access{CAConfigMap: "corp-ca"}, "", true},
		{registry.Access{}, "certificate", true},
		{registry.Access{CAConfigMap: "missing"}, "getting registry CA ConfigMap sys/missing", false},
		{registry.Access{CAConfigMap: "empty-ca"}, `registry CA ConfigMap sys/empty-ca: key "ca.crt" holds no PEM certificate`, false},
	} {
		c, err := Remote(kube, "sys")(ctx, tc.access)
		if tc.clientOK != (err == nil) {
			t.Errorf("Remote(%+v) = %v", tc.access, err)
			continue
		}
		if err == nil {
			_, err = c.Digest(ctx, ref)
		}
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: got %v, want %q", tc.access, err, tc.want)
		}
	}
}
