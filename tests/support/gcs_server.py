"""A small stateful fake of the Cloud Storage JSON API and the IAM service-account API, for the real
google-cloud-storage client and google.auth's AuthorizedSession.

Cloud Storage (https://cloud.google.com/storage/docs/json_api/v1): buckets insert/get/list/patch,
getIamPolicy/setIamPolicy (policy version 3 rules for conditions), objects multipart insert, get,
list (prefix), delete, and media download. IAM v1: projects.serviceAccounts create/get/list/delete.

Who calls: a request without Authorization is the project's owner (dlrun itself). A bearer token
"sa:EMAIL" is that service account (what a node's metadata server would hand out): its object and
list calls are allowed only by the bucket's bindings for it, with the two condition forms
infra/gcp/storage.py writes (resource.name.startsWith, objectListPrefix) evaluated; else 403.

    with FakeGcs() as gcs:
        client = storage.Client(project=gcs.project, credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": gcs.endpoint})
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlparse

from tests.support.http import LocalHttpServer

BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
ACCOUNT_RE = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
STARTS_WITH = re.compile(r'resource\.name\.startsWith\("([^"]*)"\)')
LIST_PREFIX = re.compile(r'objectListPrefix", ""\)\.startsWith\("([^"]*)"\)')
READ_ROLES = {"roles/storage.objectAdmin", "roles/storage.objectViewer"}
WRITE_ROLES = {"roles/storage.objectAdmin"}


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class FakeGcs(LocalHttpServer):
    project: str = "dlrun-test"
    buckets: dict = field(default_factory=dict)   # name -> bucket JSON
    policies: dict = field(default_factory=dict)  # bucket -> IAM policy JSON
    objects: dict = field(default_factory=dict)   # (bucket, name) -> (bytes, object JSON)
    accounts: dict = field(default_factory=dict)  # email -> service account JSON
    foreign_buckets: set = field(default_factory=set)  # names another project holds: 403 to us
    # IAM is eventually consistent: a new account reads as 404 (IAM GET) and is unknown to setIamPolicy
    # (400) for this many such calls each after its creation
    account_lag: int = 0
    requests: list = field(default_factory=list)  # (method, path, headers, body bytes) of every call

    def __post_init__(self):
        self._lock = threading.Lock()
        self._generation = 0
        self._unseen: dict[str, list[int]] = {}  # email -> [IAM GETs, setIamPolicy calls] still to refuse

    def make_handler(self):  # served by LocalHttpServer (start/stop/endpoint)
        return _handler_for(self)

    def handle(self, method: str, path: str, query: dict, headers: dict, raw: bytes) -> tuple[int, object, dict]:
        with self._lock:
            self.requests.append((method, path, dict(headers), raw))
            try:
                return self._route(method, path, {k: v[-1] for k, v in query.items()}, headers, raw)
            except ApiError as e:
                return e.status, {"error": {"code": e.status, "message": e.message,
                                            "errors": [{"message": e.message}]}}, {}

    # ------------------------------------------------------------------ routing
    def _route(self, method, path, query, headers, raw):
        caller = _caller(headers.get("authorization", ""))
        if m := re.fullmatch(r"/v1/projects/([^/]+)/serviceAccounts(?:/([^/]+))?", path):
            return self._iam(method, m.group(1), unquote(m.group(2) or ""), _json(raw), query)
        if path == "/storage/v1/b" and method == "POST":
            return 200, self._insert_bucket(query, _json(raw)), {}
        if path == "/storage/v1/b" and method == "GET":  # buckets.list: the project's, by name prefix
            if query.get("project") != self.project:
                raise ApiError(403, f"no storage.buckets.list access to project {query.get('project')}")
            items = [b for n, b in sorted(self.buckets.items()) if n.startswith(query.get("prefix", ""))]
            return 200, {"kind": "storage#buckets", "items": items}, {}
        if m := re.fullmatch(r"/upload/storage/v1/b/([^/]+)/o", path):
            return 200, self._upload(m.group(1), query, headers, raw, caller), {}
        if m := re.fullmatch(r"/download/storage/v1/b/([^/]+)/o/(.+)", path):
            data, meta = self._object(m.group(1), unquote(m.group(2)), caller, write=False)
            return 200, data, {"x-goog-hash": f"md5={meta['md5Hash']}", "x-goog-generation": meta["generation"]}
        if m := re.fullmatch(r"/storage/v1/b/([^/]+)/o/(.+)", path):
            bucket, name = m.group(1), unquote(m.group(2))
            if method == "DELETE":
                self._object(bucket, name, caller, write=True)
                del self.objects[(bucket, name)]
                return 204, b"", {}
            data, meta = self._object(bucket, name, caller, write=False)
            return 200, (data if query.get("alt") == "media" else meta), {}
        if m := re.fullmatch(r"/storage/v1/b/([^/]+)/o", path):
            return 200, self._list(m.group(1), query.get("prefix", ""), caller), {}
        if m := re.fullmatch(r"/storage/v1/b/([^/]+)/iam", path):
            return 200, self._iam_policy(m.group(1), method, query, _json(raw), caller), {}
        if m := re.fullmatch(r"/storage/v1/b/([^/]+)", path):
            bucket = self._bucket(m.group(1), caller)
            if method == "PATCH":
                bucket.update(_json(raw) or {})
            return 200, bucket, {}
        raise ApiError(404, f"no such endpoint {method} {path}")

    # ------------------------------------------------------------------ IAM service accounts
    def _iam(self, method, project, email, body, query):
        if project != self.project:
            raise ApiError(403, f"Permission denied on project {project}")
        if method == "GET" and not email:  # list: pageSize (default 20, at most 100) and pageToken
            size, start = min(int(query.get("pageSize") or 20), 100), int(query.get("pageToken") or 0)
            emails = sorted(e for e in self.accounts if not self._unseen.get(e, [0])[0])
            page = {"accounts": [self.accounts[e] for e in emails[start:start + size]]}
            if start + size < len(emails):
                page["nextPageToken"] = str(start + size)
            return 200, page, {}
        if method == "POST" and not email:
            account = (body or {}).get("accountId", "")
            if not ACCOUNT_RE.match(account):
                raise ApiError(400, f"Invalid accountId {account!r}: 6-30 of [a-z0-9-], starting with a letter")
            email = f"{account}@{project}.iam.gserviceaccount.com"
            if email in self.accounts:
                raise ApiError(409, f"Service account {account} already exists within project {project}.")
            self.accounts[email] = {"name": f"projects/{project}/serviceAccounts/{email}", "email": email,
                                    "projectId": project, **(body.get("serviceAccount") or {})}
            self._unseen[email] = [self.account_lag, self.account_lag]
            return 200, self.accounts[email], {}
        if email not in self.accounts or self._not_seen_yet(email, 0):
            raise ApiError(404, f"Service account projects/{project}/serviceAccounts/{email} not found.")
        if method == "DELETE":
            del self.accounts[email]
            return 200, {}, {}
        return 200, self.accounts[email], {}

    def _not_seen_yet(self, email: str, which: int) -> bool:
        left = self._unseen.get(email)
        if left and left[which] > 0:
            left[which] -= 1
            return True
        return False

    # ------------------------------------------------------------------ buckets
    def _insert_bucket(self, query, body):
        name = (body or {}).get("name", "")
        if query.get("project") != self.project:
            raise ApiError(400, "Invalid project")
        if not BUCKET_RE.match(name) or name.startswith("goog"):
            raise ApiError(400, f"Invalid bucket name: {name!r}")
        if name in self.buckets or name in self.foreign_buckets:
            raise ApiError(409, "The requested bucket name is not available.")
        self.buckets[name] = {**body, "kind": "storage#bucket", "id": name, "name": name, "metageneration": "1",
                              "location": (body.get("location") or "US").upper()}
        self.policies[name] = {"kind": "storage#policy", "resourceId": f"projects/_/buckets/{name}", "version": 1,
                               "etag": "CAE=", "bindings": [
                                   {"role": "roles/storage.legacyBucketOwner",
                                    "members": [f"projectOwner:{self.project}"]}]}
        return self.buckets[name]

    def _bucket(self, name, caller=None):
        # a node account holds object roles only: no storage.buckets.get
        if name in self.foreign_buckets or (caller and name in self.buckets):
            raise ApiError(403, f"caller does not have storage.buckets.get access to the Google Cloud Storage "
                                f"bucket {name}.")
        if name not in self.buckets:
            raise ApiError(404, "The specified bucket does not exist.")
        return self.buckets[name]

    def _iam_policy(self, name, method, query, body, caller):
        self._bucket(name, caller)
        policy = self.policies[name]
        conditional = any("condition" in b for b in policy["bindings"])
        if method == "GET":
            if conditional and int(query.get("optionsRequestedPolicyVersion", 1)) < 3:
                raise ApiError(400, "Bucket policy has conditions: request policy version 3")
            return policy
        if any("condition" in b for b in body.get("bindings", [])) and body.get("version", 1) < 3:
            raise ApiError(400, "IAM policy with conditions must be version 3")
        for binding in body.get("bindings", []):
            for member in binding.get("members", []):
                email = member.split(":", 1)[1]
                unknown = email not in self.accounts or self._not_seen_yet(email, 1)
                if member.startswith("serviceAccount:") and unknown:
                    raise ApiError(400, f"Service account {member} does not exist.")
        self.policies[name] = {**body, "kind": "storage#policy", "resourceId": f"projects/_/buckets/{name}",
                               "etag": base64.b64encode(hashlib.md5(json.dumps(body).encode()).digest()).decode()}
        return self.policies[name]

    # ------------------------------------------------------------------ objects
    def _allowed(self, bucket, caller, *, write: bool, name: str | None = None, list_prefix: str | None = None) -> bool:
        if caller is None:
            return True
        roles = WRITE_ROLES if write else READ_ROLES
        for b in self.policies.get(bucket, {}).get("bindings", []):
            if f"serviceAccount:{caller}" not in b.get("members", []) or b["role"] not in roles:
                continue
            expression = (b.get("condition") or {}).get("expression", "")
            if not expression:
                return True
            if name is not None and (m := STARTS_WITH.search(expression)) and \
                    f"projects/_/buckets/{bucket}/objects/{name}".startswith(m.group(1)):
                return True
            if list_prefix is not None and (m := LIST_PREFIX.search(expression)) and list_prefix.startswith(m.group(1)):
                return True
        return False

    def _object(self, bucket, name, caller, *, write: bool):
        self._bucket(bucket)
        if not self._allowed(bucket, caller, write=write, name=name):
            raise ApiError(403, f"{caller} does not have storage.objects.{'delete' if write else 'get'} access "
                                f"to the Google Cloud Storage object {bucket}/{name}.")
        if (bucket, name) not in self.objects:
            raise ApiError(404, f"No such object: {bucket}/{name}")
        return self.objects[(bucket, name)]

    def _upload(self, bucket, query, headers, raw, caller):
        self._bucket(bucket)
        if query.get("uploadType") != "multipart":
            raise ApiError(400, "this fake takes multipart uploads only")
        meta, data = _multipart(headers.get("content-type", ""), raw)
        name = meta.get("name") or query.get("name", "")
        if not self._allowed(bucket, caller, write=True, name=name):
            raise ApiError(403, f"{caller} does not have storage.objects.create access to {bucket}/{name}.")
        self._generation += 1
        md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
        obj = {"kind": "storage#object", "bucket": bucket, "name": name, "id": f"{bucket}/{name}/{self._generation}",
               "size": str(len(data)), "generation": str(self._generation), "metageneration": "1",
               "contentType": meta.get("contentType", "application/octet-stream"), "md5Hash": md5}
        self.objects[(bucket, name)] = (data, obj)
        return obj

    def _list(self, bucket, prefix, caller):
        self._bucket(bucket)
        if not self._allowed(bucket, caller, write=False, list_prefix=prefix):
            raise ApiError(403, f"{caller} does not have storage.objects.list access to {bucket} (prefix {prefix!r}).")
        items = [meta for (b, n), (_, meta) in sorted(self.objects.items()) if b == bucket and n.startswith(prefix)]
        return {"kind": "storage#objects", "items": items} if items else {"kind": "storage#objects"}


def _caller(authorization: str) -> str | None:
    token = authorization.split(" ", 1)[1] if authorization.lower().startswith("bearer ") else ""
    return token[3:] if token.startswith("sa:") else None


def _json(raw: bytes):
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        raise ApiError(400, "body is not JSON") from None


def _multipart(content_type: str, raw: bytes) -> tuple[dict, bytes]:
    """multipart/related: the object's JSON metadata, then its bytes (the client's multipart upload)."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        raise ApiError(400, "multipart upload without a boundary")
    parts = raw.split(b"--" + m.group(1).encode())[1:-1]
    if len(parts) != 2:
        raise ApiError(400, f"multipart upload with {len(parts)} parts")
    bodies = [p.split(b"\r\n\r\n", 1)[1][:-2] for p in parts]  # drop headers and the CRLF before the boundary
    return json.loads(bodies[0]), bodies[1]


def _handler_for(fake: FakeGcs):
    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload, extra = fake.handle(self.command, url.path, parse_qs(url.query), headers, raw)
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            ctype = "application/octet-stream" if isinstance(payload, bytes) else "application/json; charset=UTF-8"
            self.send_header("Content-Type", ctype)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if status != 204:
                self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

        def log_message(self, *args):  # keep test output quiet
            pass

    return Handler
