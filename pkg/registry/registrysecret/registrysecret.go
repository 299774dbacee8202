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

// Package registrysecret gives the controller registry clients with the
// credentials of a Secret it reads from the API; it stands apart from
// package registry so that the committer, which uses that, links no
// Kubernetes client.
package registrysecret

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/dockerconfig"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
)

// Remote returns a registry.For that reads the Secret and the CA ConfigMap
// from namespace and talks to the registry with go-containerregistry's
// remote.
func Remote(kube kubernetes.Interface, namespace string) registry.For {
	return func(ctx context.Context, access registry.Access) (registry.Client, error) {
		keychain := dockerconfig.Anonymous()
		if secretName := access.Secret; secretName != "" {
			secret, err := kube.CoreV1().Secrets(namespace).Get(ctx, secretName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("getting registry Secret %s/%s: %w", namespace, secretName, err)
			}
			if secret.Type != corev1.SecretTypeDockerConfigJson {
				return nil, fmt.Errorf("registry Secret %s/%s is of type %q, want %q",
					namespace, secretName, secret.Type, corev1.SecretTypeDockerConfigJson)
			}
			keychain, err = dockerconfig.Parse(secret.Data[corev1.DockerConfigJsonKey], "in Secret "+namespace+"/"+secretName)
			if err != nil {
				return nil, err
			}
		}
		if access.CAConfigMap == "" {
			return registry.New(keychain), nil
		}
		roots, err := rootCAs(ctx, kube, namespace, access.CAConfigMap)
		if err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		return registry.New(keychain, remote.WithTransport(tr)), nil
	}
}

// rootCAs returns the system's roots with the PEM certificates of every
// value of the ConfigMap name in namespace added.
func rootCAs(ctx context.Context, kube kubernetes.Interface, namespace, name string) (*x509.CertPool, error) {
	cm, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("getting registry CA ConfigMap %s/%s: %w", namespace, name, err)
	}
	pems := make(map[string][]byte, len(cm.Data))
	for key, pem := range cm.Data {
		pems[fmt.Sprintf("registry CA ConfigMap %s/%s: key %q", namespace, name, key)] = []byte(pem)
	}
	return registry.RootCAs(pems)
}
