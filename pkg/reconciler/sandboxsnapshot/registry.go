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

package sandboxsnapshot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/dockerconfig"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/config"
)

// registryTimeout bounds each request to the registry, so that a slow
// registry does not hold a worker.
const registryTimeout = 20 * time.Second

// imageRegistry is what the controller does in the snapshot registry: look
// manifests up and delete them, by digest.
type imageRegistry interface {
	// Digest returns the digest of the manifest ref names (a tag or a
	// digest), or "" when the registry does not hold it.
	Digest(ctx context.Context, ref name.Reference) (string, error)
	// Delete deletes the manifest of the given digest; one the registry
	// does not hold counts as deleted.
	Delete(ctx context.Context, ref name.Digest) error
}

// registryFor returns the registry client of the current configuration.
type registryFor func(ctx context.Context, cfg *config.Snapshot) (imageRegistry, error)

// remoteRegistries returns a registryFor that talks to the registry with
// the push Secret's credentials, read from the operator's namespace.
func remoteRegistries(kube kubernetes.Interface, namespace string) registryFor {
	return func(ctx context.Context, cfg *config.Snapshot) (imageRegistry, error) {
		keychain := dockerconfig.Anonymous()
		if cfg.PushSecret != "" {
			secret, err := kube.CoreV1().Secrets(namespace).Get(ctx, cfg.PushSecret, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("getting push Secret %s/%s named by ConfigMap %s (key %q): %w",
					namespace, cfg.PushSecret, config.SnapshotConfigName, config.PushSecretKey, err)
			}
			if secret.Type != corev1.SecretTypeDockerConfigJson {
				return nil, fmt.Errorf("push Secret %s/%s is of type %q, want %q",
					namespace, cfg.PushSecret, secret.Type, corev1.SecretTypeDockerConfigJson)
			}
			keychain, err = dockerconfig.Parse(secret.Data[corev1.DockerConfigJsonKey], "in Secret "+namespace+"/"+cfg.PushSecret)
			if err != nil {
				return nil, err
			}
		}
		return &remoteRegistry{keychain: keychain}, nil
	}
}

// remoteRegistry is an imageRegistry over go-containerregistry's remote.
type remoteRegistry struct {
	keychain *dockerconfig.Keychain
}

func (r *remoteRegistry) options(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(r.keychain)}
}

// Digest implements imageRegistry.
func (r *remoteRegistry) Digest(ctx context.Context, ref name.Reference) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	desc, err := remote.Head(ref, r.options(ctx)...)
	switch {
	case isNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("looking up %s: %w", ref, err)
	}
	return desc.Digest.String(), nil
}

// Delete implements imageRegistry.
func (r *remoteRegistry) Delete(ctx context.Context, ref name.Digest) error {
	ctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	if err := remote.Delete(ref, r.options(ctx)...); err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting %s: %w", ref, err)
	}
	return nil
}

// isNotFound reports whether err is the registry's 404.
func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// nameOptions parse image references of the configured registry.
func nameOptions(cfg *config.Snapshot) []name.Option {
	if cfg.InsecureRegistry {
		return []name.Option{name.Insecure}
	}
	return nil
}
