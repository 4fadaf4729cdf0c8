"""Retrieve the protocol's studies from a PACS into the local store the scan reads.

:func:`retrieve_studies` runs the query of ``data.source``, fetches every study not already complete in
the store (at most ``max_connections`` at once, with a progress bar) and returns what the run records:
the folder to scan, the studies that could not be fetched (each becomes an exclusion with its reason),
and a summary for ``provenance.json`` that names the query and what it returned (counts and hashes,
never a UID, an accession number or a credential).
"""

from __future__ import annotations

import csv
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sitecal._progress import progress_bar
from sitecal._text import plural
from sitecal.errors import DataError
from sitecal.pacs._credentials import Credentials, load_credentials, missing_tls_files
from sitecal.pacs._peer import PacsError, Peer, StudyRef
from sitecal.pacs._store import InstanceStore, uid_key
from sitecal.protocol import DicomwebSource, DimseSource, PacsQuery

__all__ = ["Retrieval", "query_filters", "retrieve_studies", "source_problems"]

logger = logging.getLogger(__name__)

#: Pauses (s) before a study whose fetch failed transiently (:class:`PacsError` ``transient``) is asked
#: again, once after each; a study still failing after the last is an exclusion with its last reason.
RETRY_PAUSES_S = (1.0, 4.0)

#: Largest worklist CSV read (accession numbers).
MAX_WORKLIST_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Retrieval:
    """What a retrieval did: the store's folder, the files of the query's studies, the failed studies.

    ``files`` (relative to ``folder``) are the instances of the studies the query returned and that are
    complete in the store: what the scan reads (not a study the PACS no longer returns, nor the part of
    a study that failed). ``summary`` is what provenance records.
    """

    folder: Path
    files: frozenset[Path]
    failed: tuple[tuple[str, str], ...]  # (StudyInstanceUID, reason): in memory only
    summary: dict[str, Any] = field(default_factory=dict)


def _worklist(path: Path) -> list[str]:
    where = f"data.source.query.accession_numbers {path}"
    try:
        if path.stat().st_size > MAX_WORKLIST_BYTES:
            raise DataError(f"{where}: larger than 64 MiB.")
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or "AccessionNumber" not in reader.fieldnames:
                raise DataError(
                    f"{where}: needs a column named AccessionNumber (one accession number a row)."
                )
            values = sorted({(row.get("AccessionNumber") or "").strip() for row in reader} - {""})
    except FileNotFoundError:
        raise DataError(f"{where}: not found.") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{where}: cannot be read as UTF-8 CSV ({type(exc).__name__}).") from None
    if not values:
        raise DataError(f"{where}: lists no accession number.")
    return values


def query_filters(query: PacsQuery, resolve: Callable[[str], Path]) -> list[list[dict[str, str]]]:
    """The QIDO searches of a query: one list per field, whose results are joined; the fields intersect.

    Within a field the values are alternatives (one search each); a study must match every field given.
    Station and institution names are matched at series level (where the PACS indexes them).
    """
    base: dict[str, str] = {}
    if query.study_dates is not None:
        first, last = query.study_dates
        base["StudyDate"] = f"{first:%Y%m%d}-{last:%Y%m%d}"
    fields: list[list[dict[str, str]]] = []
    if query.modalities:
        fields.append([{**base, "ModalitiesInStudy": m} for m in query.modalities])
    if query.accession_numbers is not None:
        fields.append([{**base, "AccessionNumber": a} for a in _worklist(resolve(query.accession_numbers))])
    if query.station_names:
        fields.append([{**base, "StationName": s, "_level": "series"} for s in query.station_names])
    if query.institutions:
        fields.append([{**base, "InstitutionName": s, "_level": "series"} for s in query.institutions])
    return fields or [[dict(base)]]


def _find(peer: Peer, query: PacsQuery, resolve: Callable[[str], Path]) -> list[StudyRef]:
    chosen: set[str] | None = None
    for searches in query_filters(query, resolve):
        found = {s.study_uid for s in peer.find_studies([dict(f) for f in searches])}
        chosen = found if chosen is None else chosen & found
    return [StudyRef(uid) for uid in sorted(chosen or ())]


def _peer(
    source: DicomwebSource | DimseSource,
    credentials: Credentials | None,
    resolve: Callable[[str], Path],
    store: InstanceStore | None = None,
) -> Peer:
    if isinstance(source, DimseSource):
        from sitecal.pacs._dimse import DimsePeer

        return DimsePeer(source, credentials, resolve, store)
    from sitecal.pacs._dicomweb import DicomwebPeer

    return DicomwebPeer(source, credentials, resolve)


def retrieve_studies(
    source: DicomwebSource | DimseSource,
    *,
    store: Path,
    resolve: Callable[[str], Path],
    progress: bool = True,
) -> Retrieval:
    """Query the PACS and bring every matching study into ``store`` (resuming a previous retrieval).

    ``store``: the source's folder (``LoadedProtocol.pacs_store``); ``resolve`` turns protocol paths into
    paths (credentials, worklist, TLS files).
    """
    credentials = load_credentials(
        None if source.credentials_file is None else resolve(source.credentials_file)
    )
    instances = InstanceStore(store)
    instances.files.mkdir(parents=True, exist_ok=True)
    try:
        with _peer(source, credentials, resolve, instances) as peer:
            return _retrieve(peer, source, instances, resolve, progress)
    except PacsError as exc:
        raise DataError(f"data.source: {exc}") from None


def _retrieve(
    peer: Peer,
    source: DicomwebSource | DimseSource,
    instances: InstanceStore,
    resolve: Callable[[str], Path],
    progress: bool,
) -> Retrieval:
    try:
        studies = _find(peer, source.query, resolve)
    except PacsError as exc:
        raise PacsError(f"the PACS query failed. {exc}") from None
    todo = [s for s in studies if not instances.has_study(s.study_uid)]
    logger.info(
        "PACS query: %d %s; %d already in the local store, %d to retrieve",
        len(studies),
        plural(len(studies), "study", "studies"),
        len(studies) - len(todo),
        len(todo),
    )
    fetched, errors, asked_again = _fetch_all(peer, instances, todo, source.max_connections, progress)
    failed = [(s.study_uid, f"not retrieved from the PACS: {e}") for s, e in errors.items()]
    instances.save()
    if failed:
        logger.warning(
            "%d of %d %s could not be retrieved; each is listed as an exclusion",
            len(failed),
            len(studies),
            plural(len(studies), "study", "studies"),
        )
    retrieved = [uid_key(s.study_uid) for s in studies if instances.has_study(s.study_uid)]
    reasons: dict[str, int] = {}
    for _, reason in failed:
        reasons[reason] = reasons.get(reason, 0) + 1
    summary = {
        "route": peer.route,
        "service": peer.describe(),
        "query": source.query.model_dump(mode="json", exclude_none=True),
        "studies_found": len(studies),
        "studies_retrieved_now": len(todo) - len(failed),
        "studies_from_store": len(studies) - len(todo),
        "studies_failed": len(failed),
        "studies_asked_again": len(asked_again),
        "failures": [{"reason": r, "count": n} for r, n in sorted(reasons.items())],
        "instances_fetched": fetched,
        "requests": peer.requests,
        "connections": peer.connections,
        "max_connections": source.max_connections,
        "objects_sha256": instances.objects_digest(retrieved),
        "store": instances.root.name,
    }
    files = frozenset(
        instances.object_path(d).relative_to(instances.files) for d in instances.object_digests(retrieved)
    )
    return Retrieval(folder=instances.files, files=files, failed=tuple(sorted(failed)), summary=summary)


def _fetch_all(
    peer: Peer, instances: InstanceStore, todo: list[StudyRef], max_connections: int, progress: bool
) -> tuple[int, dict[StudyRef, PacsError], set[StudyRef]]:
    """Fetch ``todo``, asking again after each pause the studies that failed transiently.

    Returns the instances fetched, each study still failed with its last error, and the studies asked
    again. The progress bar is the stage's one line: it counts a study once it is settled
    (fetched, failed for good, or failed after the last pause), so that it reaches 100 % only at the
    end, and closes once.
    """
    fetched = 0
    asked_again: set[StudyRef] = set()
    errors: dict[StudyRef, PacsError] = {}
    pauses = (None, *RETRY_PAUSES_S)
    # every frame shows the average rate, the one the closing frame shows (a moving average would show a
    # burst's rate before the retries' pauses and another rate at the end)
    bar = progress_bar(total=len(todo), desc="Retrieving", unit="study", disable=not progress)
    pool = ThreadPoolExecutor(max_workers=max_connections)
    try:
        pending = todo
        for i, pause in enumerate(pauses):
            if pause is not None:
                pending = [s for s in pending if errors[s].transient]
                if not pending:
                    break
                logger.info(
                    "%d %s asked again after %g s (a transient failure)",
                    len(pending),
                    plural(len(pending), "study", "studies"),
                    pause,
                )
                time.sleep(pause)
                asked_again.update(pending)
            n, now = _fetch_pass(pool, peer, instances, pending, bar, last=i == len(pauses) - 1)
            fetched += n
            for study in pending:
                errors.pop(study, None)
            errors.update(now)
            pending = list(now)
    finally:
        # on Ctrl-C (or any failure) the studies not started are dropped, not fetched on the way out;
        # those in flight finish, and every complete study is already in the store's index
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return fetched, errors, asked_again


def _fetch_pass(
    pool: ThreadPoolExecutor,
    peer: Peer,
    instances: InstanceStore,
    studies: list[StudyRef],
    bar: tqdm,
    *,
    last: bool,
) -> tuple[int, dict[StudyRef, PacsError]]:
    """Fetch ``studies`` on the pool: the instances fetched, and each failed study's error (in UID order).

    ``bar`` counts the studies this pass settles: each fetched or failed for good, and on the ``last``
    pass each that failed transiently too (on an earlier one it is asked again, and counted then).
    """
    fetched, errors = 0, {}
    futures = {pool.submit(peer.fetch_study, s, instances): s for s in studies}
    for future in as_completed(futures):  # a loop over studies as they finish
        try:
            fetched += future.result()
        except PacsError as exc:
            if exc.fatal:  # it would fail every study alike: stop here (the queued studies are dropped)
                raise
            errors[futures[future]] = exc
            if exc.transient and not last:
                continue
        bar.update()
    return fetched, {s: errors[s] for s in sorted(errors, key=lambda s: s.study_uid)}


def source_problems(source: DicomwebSource | DimseSource, resolve: Callable[[str], Path]) -> list[str]:
    """What a run would refuse of ``data.source``, found in seconds: one line each (for ``sitecal check``).

    Reads the credentials, the worklist and the TLS files, then asks the PACS once (DICOMweb: a study
    search limited to one answer; DIMSE: a TCP connection and TLS handshake, an association offering the
    query and the retrieval, and a C-FIND that matches nothing; C-MOVE: the move port is free), so that
    a wrong URL or AE title, a stopped server, an untrusted certificate or refused credentials show here.
    """
    problems = missing_tls_files(source.tls, resolve, "data.source")
    try:
        credentials = load_credentials(
            None if source.credentials_file is None else resolve(source.credentials_file)
        )
        query_filters(source.query, resolve)
    except DataError as exc:
        return [*problems, str(exc)]
    if problems:
        return problems
    try:
        with _peer(source, credentials, resolve) as peer:
            peer.probe()
    except PacsError as exc:
        return [f"data.source: {exc}"]
    return []
