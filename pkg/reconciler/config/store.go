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

package config

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/configmap"
)

type cfgKey struct{}

// Config is the set of settings a reconcile sees, frozen for its duration.
type Config struct {
	Snapshot *Snapshot
}

// FromContext returns the Config attached by Store.ToContext.
func FromContext(ctx context.Context) *Config {
	cfg, _ := ctx.Value(cfgKey{}).(*Config)
	return cfg
}

// ToContext attaches a Config to a context.
func ToContext(ctx context.Context, c *Config) context.Context {
	return context.WithValue(ctx, cfgKey{}, c)
}

// Store watches config-snapshot and hands each reconcile a frozen Config.
type Store struct {
	*configmap.UntypedStore
}

// NewStore creates a Store; call WatchConfigs to start it.
func NewStore(logger configmap.Logger, onAfterStore ...func(name string, value any)) *Store {
	return &Store{
		UntypedStore: configmap.NewUntypedStore(
			"snapshot",
			logger,
			configmap.Constructors{
				SnapshotConfigName: NewSnapshotFromConfigMap,
			},
			onAfterStore...,
		),
	}
}

// ToContext attaches the current Config to a context.
func (s *Store) ToContext(ctx context.Context) context.Context {
	return ToContext(ctx, s.Load())
}

// Load returns the current Config. Before config-snapshot is first read it
// holds the defaults, which lack a registry.
func (s *Store) Load() *Config {
	snapshot, ok := s.UntypedLoad(SnapshotConfigName).(*Snapshot)
	if !ok {
		snapshot, _ = NewSnapshotFromConfigMap(&corev1.ConfigMap{})
	}
	return &Config{Snapshot: snapshot}
}
