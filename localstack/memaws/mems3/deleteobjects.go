package mems3

import (
	"encoding/xml"
	"net/http"
)

const maxDeleteObjects = 1000

type deleteIn struct {
	Quiet   bool `xml:"Quiet"`
	Objects []struct {
		Key       string `xml:"Key"`
		VersionID string `xml:"VersionId"`
		ETag      string `xml:"ETag"`
	} `xml:"Object"`
}

type deleteOut struct {
	XMLName xml.Name      `xml:"http://s3.amazonaws.com/doc/2006-03-01/ DeleteResult"`
	Deleted []deletedXML  `xml:"Deleted"`
	Errors  []deleteError `xml:"Error"`
}

type deletedXML struct {
	Key                   string `xml:"Key"`
	VersionID             string `xml:"VersionId,omitempty"`
	DeleteMarker          bool   `xml:"DeleteMarker,omitempty"`
	DeleteMarkerVersionID string `xml:"DeleteMarkerVersionId,omitempty"`
}

type deleteError struct {
	Key       string `xml:"Key"`
	VersionID string `xml:"VersionId,omitempty"`
	Code      string `xml:"Code"`
	Message   string `xml:"Message"`
}

// deleteObjects applies each delete of the batch as DeleteObject would,
// each atomically (S3 gives no atomicity across the batch; here the whole
// batch happens to be applied in one critical section). S3 requires the
// body to carry an integrity header and checks it.
func (s *Server) deleteObjects(rq *request) (*response, *s3Error) {
	body, trailers, err := readPayload(rq.r)
	if err != nil {
		return nil, err
	}
	if rq.r.Header.Get("Content-Md5") == "" {
		if alg, _, cerr := requestChecksum(rq.r.Header, trailers); cerr != nil || alg == "" {
			return nil, errInvalidRequest("Missing required header for this request: Content-MD5")
		}
	}
	if err := verifyPayload(rq.r.Header, trailers, body); err != nil {
		return nil, err
	}
	var in deleteIn
	if xml.Unmarshal(body, &in) != nil || len(in.Objects) == 0 || len(in.Objects) > maxDeleteObjects {
		return nil, errMalformedXML()
	}
	faults := make([]*Failure, len(in.Objects))
	for i, o := range in.Objects {
		faults[i] = s.faultFor(rq.op, rq.bucket, o.Key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	out := deleteOut{}
	for i, o := range in.Objects {
		if f := faults[i]; f != nil && !f.AfterApply {
			fe := failureError(f)
			out.Errors = append(out.Errors, deleteError{Key: o.Key, VersionID: o.VersionID, Code: fe.code, Message: fe.message})
			continue
		}
		hasVID := o.VersionID != ""
		if hasVID && !wellFormedVersionID(o.VersionID) {
			out.Errors = append(out.Errors, deleteError{Key: o.Key, VersionID: o.VersionID, Code: "NoSuchVersion",
				Message: "The specified version does not exist."})
			continue
		}
		if cerr := checkDeleteCondition(o.ETag, b, o.Key); cerr != nil {
			out.Errors = append(out.Errors, deleteError{Key: o.Key, VersionID: o.VersionID, Code: cerr.code, Message: cerr.message})
			continue
		}
		res := s.deleteOne(rq, b, o.Key, o.VersionID, hasVID)
		if f := faults[i]; f != nil {
			fe := failureError(f)
			out.Errors = append(out.Errors, deleteError{Key: o.Key, VersionID: o.VersionID, Code: fe.code, Message: fe.message})
			continue
		}
		if in.Quiet {
			continue
		}
		d := deletedXML{Key: o.Key, VersionID: o.VersionID}
		if res.deleteMarker {
			d.DeleteMarker = true
			d.DeleteMarkerVersionID = res.versionID
		}
		out.Deleted = append(out.Deleted, d)
	}
	resp := xmlResponse(out)
	resp.status = http.StatusOK
	return resp, nil
}
