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

// Package testing holds the listers, factory and object builders of the
// reconciler's table tests.
package testing

import (
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	fakepipelineclientset "github.com/tektoncd/pipeline/pkg/client/clientset/versioned/fake"
	pipelinelisters "github.com/tektoncd/pipeline/pkg/client/listers/pipeline/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakekubeclientset "k8s.io/client-go/kubernetes/fake"
	batchv1listers "k8s.io/client-go/listers/batch/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	fakesandboxclientset "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/clientset/versioned/fake"
	sandboxlisters "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/listers/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/imageref"
)

var clientSetSchemes = []func(*runtime.Scheme) error{
	fakekubeclientset.AddToScheme,
	fakesandboxclientset.AddToScheme,
	fakepipelineclientset.AddToScheme,
}

// Listers sorts a row's objects by client set and serves them as listers.
type Listers struct {
	sorter rtesting.ObjectSorter
}

// NewListers returns Listers holding objs.
func NewListers(objs []runtime.Object) Listers {
	scheme := runtime.NewScheme()
	for _, addTo := range clientSetSchemes {
		if err := addTo(scheme); err != nil {
			panic(err)
		}
	}
	ls := Listers{sorter: rtesting.NewObjectSorter(scheme)}
	ls.sorter.AddObjects(objs...)
	return ls
}

// GetKubeObjects returns the objects of the Kubernetes client set.
func (l *Listers) GetKubeObjects() []runtime.Object {
	return l.sorter.ObjectsForSchemeFunc(fakekubeclientset.AddToScheme)
}

// GetSandboxObjects returns the objects of this project's client set, but
// for BatchSandboxes.
func (l *Listers) GetSandboxObjects() []runtime.Object {
	var objs []runtime.Object
	for _, o := range l.sorter.ObjectsForSchemeFunc(fakesandboxclientset.AddToScheme) {
		if _, ok := o.(*v1alpha1.BatchSandbox); !ok {
			objs = append(objs, o)
		}
	}
	return objs
}

// GetBatchSandboxes returns the row's BatchSandboxes.
func (l *Listers) GetBatchSandboxes() []*v1alpha1.BatchSandbox {
	var sbs []*v1alpha1.BatchSandbox
	for _, o := range l.sorter.ObjectsForSchemeFunc(fakesandboxclientset.AddToScheme) {
		if sb, ok := o.(*v1alpha1.BatchSandbox); ok {
			sbs = append(sbs, sb)
		}
	}
	return sbs
}

// GetPipelineObjects returns the objects of Tekton's client set.
func (l *Listers) GetPipelineObjects() []runtime.Object {
	return l.sorter.ObjectsForSchemeFunc(fakepipelineclientset.AddToScheme)
}

// GetSandboxSnapshotLister returns a lister of the row's SandboxSnapshots.
func (l *Listers) GetSandboxSnapshotLister() sandboxlisters.SandboxSnapshotLister {
	return sandboxlisters.NewSandboxSnapshotLister(l.sorter.IndexerForObjectType(&v1alpha1.SandboxSnapshot{}))
}

// GetBatchSandboxLister returns a lister of the row's BatchSandboxes.
func (l *Listers) GetBatchSandboxLister() sandboxlisters.BatchSandboxLister {
	return sandboxlisters.NewBatchSandboxLister(l.sorter.IndexerForObjectType(&v1alpha1.BatchSandbox{}))
}

// GetPodLister returns a lister of the row's pods as the controllers' shared
// pod informer holds them: stripped by imageref.PodTransform.
func (l *Listers) GetPodLister() corev1listers.PodLister {
	i := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range l.sorter.ObjectsForSchemeFunc(fakekubeclientset.AddToScheme) {
		if _, ok := o.(*corev1.Pod); !ok {
			continue
		}
		stripped, err := imageref.PodTransform(o)
		if err != nil {
			panic(err)
		}
		if err := i.Add(stripped); err != nil {
			panic(err)
		}
	}
	return corev1listers.NewPodLister(i)
}

// GetTaskRunLister returns a lister of the row's TaskRuns.
func (l *Listers) GetTaskRunLister() pipelinelisters.TaskRunLister {
	return pipelinelisters.NewTaskRunLister(l.sorter.IndexerForObjectType(&pipelinev1.TaskRun{}))
}

// GetJobLister returns a lister of the row's Jobs.
func (l *Listers) GetJobLister() batchv1listers.JobLister {
	return batchv1listers.NewJobLister(l.sorter.IndexerForObjectType(&batchv1.Job{}))
}

// GetConfigMapLister returns a lister of the row's ConfigMaps.
func (l *Listers) GetConfigMapLister() corev1listers.ConfigMapLister {
	return corev1listers.NewConfigMapLister(l.sorter.IndexerForObjectType(&corev1.ConfigMap{}))
}

// Indexer returns an indexer of the row's objects of obj's type, with the
// namespace index and the given ones.
func (l *Listers) Indexer(obj runtime.Object, indexers cache.Indexers) cache.Indexer {
	i := l.sorter.IndexerForObjectType(obj)
	if err := i.AddIndexers(indexers); err != nil {
		panic(err)
	}
	return i
}
