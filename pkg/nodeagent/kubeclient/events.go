package kubeclient

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// EventSink writes an event broadcaster's Events, each in its own
// namespace, as client-go's EventSinkImpl does (in protobuf, as the
// Events client sends every Event, where EventSinkImpl sends JSON).
func EventSink(c Interface) record.EventSink { return eventSink{c} }

type eventSink struct{ c Interface }

// The broadcaster's interface has no context; its own retries bound the
// work.
func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.c.Events(e.Namespace).Create(context.Background(), e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.c.Events(e.Namespace).Update(context.Background(), e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.c.Events(e.Namespace).Patch(context.Background(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
