package openflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// Meter sends the packet through meter ID (the OpenFlow 1.3+ meter
// instruction; ovs-ofctl prints it as the first action, "meter:ID"). A
// packet over the meter's rate is dropped there, the actions after it are
// not run for it.
type Meter struct{ ID uint32 }

func (m Meter) String() string { return fmt.Sprintf("meter:%d", m.ID) }

func (m Meter) encode(b []byte) []byte { return b } // an instruction, see encodeInstructions

// MeterBand is one meter with a single drop band: packets above RateKbps
// (kilobits per second, 1000 bits), after a burst of BurstKb kilobits, are
// dropped. It is what `ovs-ofctl add-meter BRIDGE
// meter=ID,kbps,burst,band=type=drop,rate=R,burst_size=B` installs.
//
// With Pkts, the rate and burst count packets instead (pktps).
type MeterBand struct {
	ID                uint32
	RateKbps, BurstKb uint32
	Pkts              bool
}

func (m MeterBand) String() string {
	unit := "kbps"
	if m.Pkts {
		unit = "pktps"
	}
	return fmt.Sprintf("meter=%d,%s,burst,band=type=drop,rate=%d,burst_size=%d", m.ID, unit, m.RateKbps, m.BurstKb)
}

// flags are the meter's OFPMF_* flags.
func (m MeterBand) flags() uint16 {
	if m.Pkts {
		return ofpmfPktps | ofpmfBurst | ofpmfStats
	}
	return ofpmfKbps | ofpmfBurst | ofpmfStats
}

// OpenFlow 1.4 meter constants.
const (
	ofptMeterMod       = 29
	ofpitMeter         = 6
	ofpmcAdd           = 0
	ofpmcModify        = 1
	ofpmcDelete        = 2
	ofpmfKbps          = 1
	ofpmfPktps         = 2
	ofpmfBurst         = 4
	ofpmfStats         = 8
	ofpmbtDrop         = 1
	ofpetMeterModFail  = 12
	ofpmmfcMeterExists = 1
	ofpmmfcUnknown     = 3 // OFPMMFC_UNKNOWN_METER

	// MeterMax is the highest meter ID OpenFlow allows (OFPM_MAX).
	MeterMax = 0xffff0000
)

// meterMod appends an OFPT_METER_MOD (OpenFlow 1.4 section 7.3.4.4).
func meterMod(b []byte, xid uint32, cmd uint16, m MeterBand) []byte {
	start := len(b)
	b = append(b, header(ofptMeterMod, xid, 0)...)
	b = binary.BigEndian.AppendUint16(b, cmd)
	b = binary.BigEndian.AppendUint16(b, m.flags())
	b = binary.BigEndian.AppendUint32(b, m.ID)
	if cmd != ofpmcDelete {
		b = binary.BigEndian.AppendUint16(b, ofpmbtDrop)
		b = binary.BigEndian.AppendUint16(b, 16)
		b = binary.BigEndian.AppendUint32(b, m.RateKbps)
		b = binary.BigEndian.AppendUint32(b, m.BurstKb)
		b = append(b, 0, 0, 0, 0)
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b
}

// meterError reports whether err is an OFPET_METER_MOD_FAILED with code.
func meterError(err error, code uint16) bool {
	var oe *Error
	return errors.As(err, &oe) && oe.Type == ofpetMeterModFail && oe.Code == code
}

// SetMeters installs the meters, each added or, when one with its ID
// exists, modified in place (the flows that use it stay). Meters cannot be
// part of a bundle: install them before the flows that use them (a flow
// naming a missing meter is refused).
func SetMeters(ctx context.Context, target endpoint.Endpoint, meters ...MeterBand) error {
	if len(meters) == 0 {
		return nil
	}
	return session(ctx, target, "setting meters", func(s *conn) error {
		if err := s.send(hello()); err != nil {
			return err
		}
		if err := s.hello(); err != nil {
			return err
		}
		for i, m := range meters {
			if m.ID == 0 || m.ID > MeterMax {
				return fmt.Errorf("meter %d: out of range 1-%d", m.ID, uint32(MeterMax))
			}
			xid := uint32(2 * (i + 1))
			err := s.meterExchange(xid, ofpmcAdd, m)
			if meterError(err, ofpmmfcMeterExists) {
				err = s.meterExchange(xid+1, ofpmcModify, m)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteMeters removes the meters with the given IDs, and with them every
// flow that uses one; a meter that does not exist is no error.
func DeleteMeters(ctx context.Context, target endpoint.Endpoint, ids ...uint32) error {
	if len(ids) == 0 {
		return nil
	}
	return session(ctx, target, "deleting meters", func(s *conn) error {
		if err := s.send(hello()); err != nil {
			return err
		}
		if err := s.hello(); err != nil {
			return err
		}
		for i, id := range ids {
			if err := s.meterExchange(uint32(i+1), ofpmcDelete, MeterBand{ID: id}); err != nil && !meterError(err, ofpmmfcUnknown) {
				return err
			}
		}
		return nil
	})
}

// meterExchange sends one meter mod with a barrier and returns its error.
func (s *conn) meterExchange(xid uint32, cmd uint16, m MeterBand) error {
	b := meterMod(nil, xid, cmd, m)
	b = append(b, header(ofptBarrierReq, xid|1<<31, 8)...)
	if err := s.send(b); err != nil {
		return err
	}
	verb := [...]string{"add-meter", "mod-meter", "del-meter"}[cmd]
	errs, err := s.until(xid|1<<31, ofptBarrierReply, func(uint32) string { return verb + " " + m.String() })
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}

// ofpmpMeterConfig is the OFPMP_METER_CONFIG multipart type.
const ofpmpMeterConfig = 10

// meterAll is OFPM_ALL: every meter, in a meter config request.
const meterAll = 0xffffffff

// DumpMeter returns meter id as ovs-vswitchd holds it (like `ovs-ofctl
// dump-meters TARGET meter=ID`): its first band, if it is a drop band with
// the burst flag and kbps or pktps; ok is false when there is no such meter, or it
// is another kind.
func DumpMeter(ctx context.Context, target endpoint.Endpoint, id uint32) (m MeterBand, ok bool, err error) {
	err = meterConfigs(ctx, target, id, func(b []byte) (bool, error) {
		m, ok, err = decodeMeterConfig(b, id)
		return ok, err
	})
	return m, ok, err
}

// MeterIDs lists the IDs of every meter of the bridge at target (like
// `ovs-ofctl dump-meters TARGET`).
func MeterIDs(ctx context.Context, target endpoint.Endpoint) ([]uint32, error) {
	var ids []uint32
	err := meterConfigs(ctx, target, meterAll, func(b []byte) (bool, error) {
		for len(b) > 0 {
			if len(b) < 8 {
				return false, decodeErr("meter config of %d bytes", len(b))
			}
			n := int(binary.BigEndian.Uint16(b))
			if n < 8 || n > len(b) {
				return false, decodeErr("meter config length %d of %d bytes", n, len(b))
			}
			ids = append(ids, binary.BigEndian.Uint32(b[4:]))
			b = b[n:]
		}
		return false, nil
	})
	return ids, err
}

// meterConfigs sends a meter config request for id (meterAll: every
// meter) and hands each reply's list of ofp_meter_config to each, until
// the last reply or each says it is done. An unknown meter is no reply
// and no error.
func meterConfigs(ctx context.Context, target endpoint.Endpoint, id uint32, each func([]byte) (bool, error)) error {
	body := binary.BigEndian.AppendUint32(nil, id)
	body = append(body, 0, 0, 0, 0) // pad
	return multipart(ctx, target, "dumping meters", ofpmpMeterConfig, body, each, func(err error) error {
		if meterError(err, ofpmmfcUnknown) {
			return nil
		}
		return err
	})
}

// decodeMeterConfig finds meter id in a list of ofp_meter_config.
func decodeMeterConfig(b []byte, id uint32) (MeterBand, bool, error) {
	for len(b) > 0 {
		if len(b) < 8 {
			return MeterBand{}, false, decodeErr("meter config of %d bytes", len(b))
		}
		n := int(binary.BigEndian.Uint16(b))
		if n < 8 || n > len(b) {
			return MeterBand{}, false, decodeErr("meter config length %d of %d bytes", n, len(b))
		}
		flags, mid, bands := binary.BigEndian.Uint16(b[2:]), binary.BigEndian.Uint32(b[4:]), b[8:n]
		b = b[n:]
		if mid != id {
			continue
		}
		unit := flags & (ofpmfKbps | ofpmfPktps)
		if flags&ofpmfBurst == 0 || unit != ofpmfKbps && unit != ofpmfPktps || len(bands) < 16 || binary.BigEndian.Uint16(bands) != ofpmbtDrop {
			return MeterBand{}, false, nil
		}
		return MeterBand{ID: mid, RateKbps: binary.BigEndian.Uint32(bands[4:]), BurstKb: binary.BigEndian.Uint32(bands[8:]), Pkts: unit == ofpmfPktps}, true, nil
	}
	return MeterBand{}, false, nil
}
