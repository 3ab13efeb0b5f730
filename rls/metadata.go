package rls

import (
	"google.golang.org/protobuf/types/known/structpb"
)

// metadata is the response's dynamic metadata (WithDynamicMetadata), as
// the reference's ratelimitToMetadata writes it.
func (c *call) metadata() *structpb.Struct {
	req := c.req
	descs := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if o := d.GetLimit(); o != nil {
			f["limit"] = structpb.NewStringValue(o.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.Domain),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	var violations []*structpb.Value
	enabled := false
	for i := range c.ds {
		d := &c.ds[i]
		if d.role > roleUnlimited && d.lm.quota {
			enabled = true
		}
		if d.role > roleUnlimited && d.quota && !d.lm.shadow && !d.checks[pick(d.checks)].Decision.Allowed {
			violations = append(violations, structpb.NewNumberValue(float64(i)))
		}
	}
	if len(violations) > 0 {
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(enabled)
	return &structpb.Struct{Fields: fields}
}
