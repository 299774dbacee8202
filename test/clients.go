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

package test

import (
	pipelineclientset "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	sandboxclientset "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/clientset/versioned"
)

// SystemNamespace is where the operator, its ConfigMaps and its TaskRuns are.
const SystemNamespace = "sandbox-snapshot-system"

// Clients are the admin clients a suite acts with. The controller has its
// own, under its ServiceAccount.
type Clients struct {
	Kube     kubernetes.Interface
	Sandbox  sandboxclientset.Interface
	Pipeline pipelineclientset.Interface
	Dynamic  dynamic.Interface
}

// NewClients makes the clients of cfg.
func NewClients(cfg *rest.Config) (*Clients, error) {
	c := &Clients{}
	var err error
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Sandbox, err = sandboxclientset.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Pipeline, err = pipelineclientset.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}
