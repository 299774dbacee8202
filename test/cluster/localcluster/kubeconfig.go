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
	"fmt"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteTokenKubeconfig mints a token of ServiceAccount namespace/name valid
// for ttl and writes to path, readable only by its owner, a kubeconfig for
// admin's API server that authenticates with that token alone (no client
// certificate: not admin).
func WriteTokenKubeconfig(ctx context.Context, kube kubernetes.Interface, admin *rest.Config, namespace, name string, ttl time.Duration, path string) error {
	secs := int64(ttl.Seconds())
	tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	const cluster = "sso-local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{
		Server:                   admin.Host,
		CertificateAuthority:     admin.CAFile,
		CertificateAuthorityData: admin.CAData,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = cluster
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	// A new file, renamed into place: an existing one would keep its mode.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
