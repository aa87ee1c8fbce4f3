package watch

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"
)

// kubeAnnotationPrefix is the prefix of every annotation ringxds reads on a
// Service.
const kubeAnnotationPrefix = "ringxds.io/"

// kubeSliceSelector is the label selector of the EndpointSlice watch: slices
// that name a Service, narrowed by the Service selector's requirements.
//
// That narrowing is sound because the EndpointSlice controller copies a
// Service's labels onto each of its slices (setEndpointSliceLabels in
// k8s.io/endpointslice, utils.go, called from newEndpointSlice and on every
// reconcile), so a slice matches the selector exactly when its Service does.
// Without it every slice in the cluster is cached, whatever the selector.
// The controller does not copy the reserved keys kubernetes.io/service-name,
// endpointslice.kubernetes.io/managed-by and service.kubernetes.io/headless
// (it writes its own values), so requirements on those keys are left out:
// slices are then filtered less, never wrongly. Slices written by anything
// else (by hand, or mirrored from a selectorless Service's Endpoints, whose
// labels the mirroring controller copies instead) must carry the labels
// too, or the Service is served without endpoints.
func kubeSliceSelector(svcSel labels.Selector) labels.Selector {
	named, err := labels.NewRequirement(discoveryv1.LabelServiceName, selection.Exists, nil)
	if err != nil {
		// A constant, valid key: unreachable.
		panic(err)
	}
	sel := labels.NewSelector().Add(*named)
	reqs, _ := svcSel.Requirements()
	for _, r := range reqs {
		if !kubeSliceReservedLabel(r.Key()) {
			sel = sel.Add(r)
		}
	}
	return sel
}

// kubeSliceReservedLabel reports whether the EndpointSlice controller sets
// the label key itself instead of copying it from the Service
// (isReservedLabelKey in k8s.io/endpointslice).
func kubeSliceReservedLabel(key string) bool {
	switch key {
	case discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy, corev1.IsHeadlessService:
		return true
	}
	return false
}

// kubeTransformService keeps what ringxds reads of a Service, so that the
// informer caches no managed fields, status, last-applied configuration or
// other annotations. It builds a new object and never writes to obj: the
// informer may pass an object that is already cached (and so read by the
// loop), and a second pass then gives the same result. The update handler
// compares Annotations and Spec of two transformed objects, which is what
// it needs: only a change to what ringxds reads rebuilds.
func kubeTransformService(obj any) (any, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		d.Obj, _ = kubeTransformService(d.Obj)
		return d, nil
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	out := &corev1.Service{
		TypeMeta: svc.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         svc.Namespace,
			Name:              svc.Name,
			UID:               svc.UID,
			ResourceVersion:   svc.ResourceVersion,
			CreationTimestamp: svc.CreationTimestamp,
			Labels:            svc.Labels,
			Annotations:       kubeOwnAnnotations(svc.Annotations),
			ManagedFields:     kubeNewestWrite(svc.ManagedFields),
		},
		Spec: corev1.ServiceSpec{Ports: svc.Spec.Ports, IPFamilies: svc.Spec.IPFamilies},
	}
	return out, nil
}

// kubeOwnAnnotations is the ringxds.io/ subset of a, nil when empty.
func kubeOwnAnnotations(a map[string]string) map[string]string {
	var out map[string]string
	for k, v := range a {
		if strings.HasPrefix(k, kubeAnnotationPrefix) {
			if out == nil {
				out = make(map[string]string)
			}
			out[k] = v
		}
	}
	return out
}

// kubeTransformSlice keeps what kubeEndpoints, kubeSliceChangeTime, the
// service index and the hash keys read of an EndpointSlice. Per endpoint it
// drops nodeName, hints, deprecatedTopology and all but the kind and name
// of targetRef; per slice, owner references, labels other than the
// Service name, and managed fields but for the newest write time, which
// kubeSliceChangeTime reads, and with it the annotations. Like kubeTransformService it builds a
// new object, shares only what it keeps, and is idempotent.
func kubeTransformSlice(obj any) (any, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		d.Obj, _ = kubeTransformSlice(d.Obj)
		return d, nil
	}
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		TypeMeta: sl.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         sl.Namespace,
			Name:              sl.Name,
			UID:               sl.UID,
			ResourceVersion:   sl.ResourceVersion,
			CreationTimestamp: sl.CreationTimestamp,
			Labels:            kubeKeep(sl.Labels, discoveryv1.LabelServiceName),
			ManagedFields:     kubeNewestWrite(sl.ManagedFields),
		},
		AddressType: sl.AddressType,
		Ports:       sl.Ports,
	}
	// kubeSliceChangeTime reads the trigger time only when no write time
	// is known; the API server records one on every write, so the map
	// (some 300 bytes) is usually not kept.
	if out.ManagedFields == nil {
		out.Annotations = kubeKeep(sl.Annotations, corev1.EndpointsLastChangeTriggerTime)
	}
	if sl.Endpoints != nil {
		out.Endpoints = make([]discoveryv1.Endpoint, len(sl.Endpoints))
		for i := range sl.Endpoints {
			out.Endpoints[i] = kubeTransformEndpoint(&sl.Endpoints[i])
		}
	}
	return out, nil
}

func kubeTransformEndpoint(e *discoveryv1.Endpoint) discoveryv1.Endpoint {
	out := discoveryv1.Endpoint{
		Addresses:  e.Addresses,
		Conditions: e.Conditions,
		Hostname:   e.Hostname,
		Zone:       e.Zone,
	}
	// Consumers may use the first address only (the API says they are
	// fungible), and kubeEndpoints does.
	if len(e.Addresses) > 1 {
		out.Addresses = []string{e.Addresses[0]}
	}
	if r := e.TargetRef; r != nil {
		out.TargetRef = &corev1.ObjectReference{Kind: r.Kind, Name: r.Name}
	}
	return out
}

// kubeKeep is the entry of m under key alone, or nil without one.
func kubeKeep(m map[string]string, key string) map[string]string {
	v, ok := m[key]
	if !ok {
		return nil
	}
	return map[string]string{key: v}
}

// kubeNewestWrite reduces managed fields to one entry holding the newest
// write time, the only part kubeSliceChangeTime reads, or nil when no entry
// has a time (it then falls back as it would with none). The field sets
// (fieldsV1) are by far the largest part.
func kubeNewestWrite(mf []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	var newest *metav1.Time
	for i := range mf {
		if t := mf[i].Time; t != nil && (newest == nil || t.After(newest.Time)) {
			newest = t
		}
	}
	if newest == nil {
		return nil
	}
	return []metav1.ManagedFieldsEntry{{Time: newest}}
}
