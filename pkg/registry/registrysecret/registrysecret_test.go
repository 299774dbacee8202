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
	"strings"
	"testing"

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
		_, err := Remote(kube, "sys")(context.Background(), secret)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Remote(%q) = %v, want %q", secret, err, want)
		}
	}
}
