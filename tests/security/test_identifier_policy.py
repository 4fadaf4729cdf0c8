"""The identifier policy of the run folder's files: paths, subgroup tags, small groups, CSV cells, the key.

Identifiers planted where sites put them (folder names, hand-typed header values, spreadsheet formulas)
must not reach an output; tags that hold them must be refused at validation, with a message that says
what to do instead.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import os
import re
import stat
from io import BytesIO
from pathlib import Path

import pydicom
import pytest
from pydantic import ValidationError
from reportlab.pdfgen.canvas import Canvas

from sitecal._io import write_csv_atomic
from sitecal._pseudonym import Pseudonymizer, load_or_create_key
from sitecal.cohort import UNKNOWN, UNMAPPED, LabelTable, ScanResult, ValueMapping, build_cohort
from sitecal.cohort.attributes import suppress_rare_values
from sitecal.cohort.scan import InstanceHeader
from sitecal.errors import OutputError, ProtocolError
from sitecal.protocol import PrivacySettings, SubgroupSettings, load_protocol
from sitecal.protocol._base import SHOWN_TAGS
from sitecal.report.dicom_pdf import write_report_dicom

PSEUDONYMIZE = Pseudonymizer(b"k" * 32)
ROOT = Path("/dicom")
PLANTED = ("DOE", "JANE", "19650304", "7777777", "99999999", "MRN", "ACC", "report")
SHOWN = ", ".join(sorted(SHOWN_TAGS))
OTHER = "other (n < 5)"


def _scan(*studies: tuple[str, dict[str, str]]) -> ScanResult:
    instances = tuple(
        InstanceHeader(
            path=ROOT / relative,
            values={"SOPInstanceUID": f"9.{i}", "StudyInstanceUID": f"1.{i}", "PatientID": f"p{i}", **values},
        )
        for i, (relative, values) in enumerate(studies)
    )
    return ScanResult(root=ROOT, files_found=len(instances), instances=instances, exclusions=())


def _cohort(subgroups: dict[str, SubgroupSettings], *studies: tuple[str, dict[str, str]], **kw: object):
    labels = LabelTable(labels={f"1.{i}": 0 for i in range(len(studies))}, bad_rows=(), n_rows=len(studies))
    return build_cohort(
        _scan(*studies),
        labels,
        subgroups=subgroups,
        key="StudyInstanceUID",
        pseudonymize=PSEUDONYMIZE,
        **kw,  # type: ignore[arg-type]
    )


# ---- paths ------------------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_folder_names_with_names_mrns_and_birth_dates_are_not_written() -> None:
    relative = "DOE^JANE_19650304/MRN7777777/ACC99999999_report.dcm"
    cohort = _cohort({}, (relative, {}))
    (study,) = cohort.studies
    written = study.relative_path
    assert not [planted for planted in PLANTED if planted in written], written
    assert re.fullmatch(r"F-[0-9a-f]{16}/F-[0-9a-f]{16}/F-[0-9a-f]{16}\.dcm", written)
    # exclusions.csv writes an exclusion's path through the same function
    assert PSEUDONYMIZE.path(Path(relative)) == written


@pytest.mark.timeout(10)
def test_a_suffix_is_kept_only_from_the_short_list() -> None:
    for name, suffix in [("IM1.dcm", ".dcm"), ("IM1.IMA", ".IMA"), ("x.dicom", ".dicom")]:
        assert PSEUDONYMIZE.path(Path("a") / name).endswith(suffix)
    # a site's own "extension" may hold anything: it is hashed with the name
    assert "." not in PSEUDONYMIZE.path(Path("a/DOE^JANE.19650304"))


@pytest.mark.timeout(10)
def test_the_same_folder_keeps_one_pseudonym_so_rows_group() -> None:
    one = PSEUDONYMIZE.path(Path("DOE^JANE/1.dcm")).split("/")[0]
    two = PSEUDONYMIZE.path(Path("DOE^JANE/2.dcm")).split("/")[0]
    other = PSEUDONYMIZE.path(Path("ROE^RICHARD/1.dcm")).split("/")[0]
    assert one == two != other
    assert Pseudonymizer(b"q" * 32).path(Path("DOE^JANE")) != one  # keyed: no one can recompute it


# ---- subgroup tags ----------------------------------------------------------------------------------


def _refused(why: str, tag: str) -> str:
    return (
        f"'{tag}' {why}, so it cannot be a subgroup, even with a mapping: its values would identify "
        f"patients in the outputs. Use one of the tags allowed as subgroups ({SHOWN}), or another tag "
        "with a mapping."
    )


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("tag", "why"),
    [
        ("OtherPatientNames", "holds a person's name (VR PN)"),
        ("PatientBirthName", "holds a person's name (VR PN)"),
        ("PatientMotherBirthName", "holds a person's name (VR PN)"),
        ("OperatorsName", "holds a person's name (VR PN)"),
        ("PerformingPhysicianName", "holds a person's name (VR PN)"),
        ("PatientName", "holds a person's name (VR PN)"),
        ("PatientBirthTime", "holds a time (VR TM)"),
        ("StudyDate", "holds a date (VR DA)"),
        ("PatientBirthDate", "holds a date (VR DA)"),
        ("AcquisitionDateTime", "holds a date and time (VR DT)"),
        ("StudyInstanceUID", "holds a UID (VR UI)"),
        ("FrameOfReferenceUID", "holds a UID (VR UI)"),
        ("PatientComments", "holds free text (VR LT)"),
        ("OtherPatientIDsSequence", "holds a sequence (VR SQ)"),
        ("PatientID", "identifies patients, studies or requests"),
        ("AccessionNumber", "identifies patients, studies or requests"),
        ("StudyID", "identifies patients, studies or requests"),
    ],
)
@pytest.mark.parametrize("mapping", [None, "groups.csv"])
def test_identifying_tags_are_refused_even_with_a_mapping(tag: str, why: str, mapping: str | None) -> None:
    with pytest.raises(ValidationError) as info:
        SubgroupSettings(tag=tag, mapping=mapping)
    (error,) = info.value.errors()
    assert error["loc"] == ("tag",)
    assert error["msg"] == "Value error, " + _refused(why, tag)


@pytest.mark.timeout(10)
def test_a_refused_tag_is_located_in_the_protocol(tmp_path: Path, demo_protocol_text: str) -> None:
    text = demo_protocol_text.replace("tag: InstitutionName", "tag: OperatorsName")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "OperatorsName" in row)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    assert str(info.value).startswith(
        f"{path}:{line}: subgroups.site.tag: " + _refused("holds a person's name (VR PN)", "OperatorsName")
    )


@pytest.mark.timeout(10)
def test_station_name_needs_a_mapping() -> None:
    with pytest.raises(ValidationError) as info:
        SubgroupSettings(tag="StationName")
    (error,) = info.value.errors()
    assert error["msg"] == (
        "Value error, 'StationName' is not among the tags whose values are shown as they are (sites type "
        "operators' names into it). Add 'mapping: <file>.csv' (columns 'value,group') to show each value as "
        f"a group name you choose; or use one of the tags allowed as subgroups: {SHOWN}."
    )
    assert SubgroupSettings(tag="StationName", mapping="stations.csv").mapping == "stations.csv"


@pytest.mark.timeout(10)
def test_an_exact_weight_needs_bands_or_a_mapping_and_text_takes_no_bands() -> None:
    with pytest.raises(ValidationError) as info:
        SubgroupSettings(tag="PatientWeight")
    assert info.value.errors()[0]["msg"] == (
        "Value error, 'PatientWeight' is not among the tags whose values are shown as they are (an exact "
        "weight picks out a patient). Add 'mapping: <file>.csv' (columns 'value,group') to show each value "
        "as a group name you choose, or 'bands' (increasing edges) to show it in ranges; or use one of the "
        f"tags allowed as subgroups: {SHOWN}."
    )
    assert SubgroupSettings(tag="PatientWeight", bands=[0, 60, 90, 500]).bands == [0, 60, 90, 500]
    with pytest.raises(ValidationError) as info:
        SubgroupSettings(tag="PatientSex", bands=[0, 1])
    assert info.value.errors()[0]["msg"] == (
        "Value error, 'bands' groups numbers, and 'PatientSex' holds text (VR CS): every value would be "
        "'unknown'. Remove 'bands', or use a mapping to group its values."
    )
    with pytest.raises(ValidationError) as info:  # a pair of numbers is no single number to band
        SubgroupSettings(tag="PixelSpacing", bands=[0, 0.5, 1])
    assert info.value.errors()[0]["msg"] == (
        "Value error, 'bands' groups single numbers, and 'PixelSpacing' holds several (VM 2): every value "
        "would be 'unknown'. Remove 'bands', or use a mapping to group its values."
    )


@pytest.mark.timeout(10)
def test_the_allowed_tags_validate_as_they_are() -> None:
    for tag in sorted(SHOWN_TAGS):
        assert SubgroupSettings(tag=tag).tag == tag
    for name in ("demo.yaml", "demo-ct.yaml"):  # the protocols users copy still validate
        load_protocol(Path(__file__).parents[2] / "src" / "sitecal" / "demo" / "protocols" / name)


# ---- small groups ------------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_a_rare_value_is_pooled_before_intersections() -> None:
    subgroups = {
        "site": SubgroupSettings(tag="InstitutionName"),
        "sex": SubgroupSettings(tag="PatientSex"),
        "site_sex": SubgroupSettings(intersection=["site", "sex"]),
        "station": SubgroupSettings(tag="StationName", mapping="stations.csv"),
    }
    mappings = {"station": ValueMapping(path=Path("stations.csv"), groups={"CT01": "Emergency"})}
    general = {"InstitutionName": "General", "StationName": "CT01"}
    studies = [(f"{i}.dcm", {**general, "PatientSex": "F"}) for i in range(5)]
    studies += [(f"{i}.dcm", {**general, "PatientSex": "M"}) for i in (5, 6)]
    studies += [
        ("7.dcm", {"InstitutionName": "SMITH JOHN 55512345", "PatientSex": "F", "StationName": "CT99"}),
        ("8.dcm", {"InstitutionName": "St Elsewhere", "PatientSex": "F"}),
        ("9.dcm", {"PatientSex": "F", "StationName": "CT01"}),
    ]
    cohort = _cohort(subgroups, *studies, mappings=mappings)
    rows = [s.attributes for s in cohort.studies]
    assert [r["site"] for r in rows] == ["General"] * 7 + [OTHER, OTHER, UNKNOWN]
    assert [r["sex"] for r in rows] == ["F"] * 5 + [OTHER, OTHER] + ["F"] * 3  # two men: pooled too
    # the two rare sites are pooled before the intersection is formed; then its rare values are pooled
    assert [r["site_sex"] for r in rows] == ["General × F"] * 5 + [OTHER] * 4 + [UNKNOWN]
    # unknown and unmapped stay, however rare
    assert [r["station"] for r in rows] == ["Emergency"] * 7 + [UNMAPPED, UNKNOWN, "Emergency"]
    assert not [r for r in rows if "SMITH" in str(r) or "Elsewhere" in str(r)]
    assert list(rows[0]) == list(subgroups)


@pytest.mark.timeout(10)
def test_k_is_the_protocols_and_one_shows_every_value() -> None:
    assert PrivacySettings().min_count_shown == 5
    with pytest.raises(ValidationError):
        PrivacySettings(min_count_shown=0)
    rows = [{"site": "A"}, {"site": "A"}, {"site": "B"}]
    assert suppress_rare_values(rows, 2) == [{"site": "A"}, {"site": "A"}, {"site": "other (n < 2)"}]
    assert suppress_rare_values(rows, 1) == rows
    message = r"^The 'k' parameter of suppress_rare_values must be an int >= 1\. Got 0\.$"
    with pytest.raises(ValueError, match=message):
        suppress_rare_values(rows, 0)


# ---- CSV cells ---------------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_formula_cells_are_escaped_and_numbers_are_not(tmp_path: Path) -> None:
    cells = [
        '=HYPERLINK("http://evil")',
        "+1+1",
        "-2+3+cmd|' /C calc'!A0",
        "@SUM(A1:A2)",
        "\t=1",
        "\r=1",
        "-",
        "-1.25",
        "-3e-05",
        "-inf",
        "+7",
        "plain",
        "a=b",
    ]
    path = tmp_path / "t.csv"
    write_csv_atomic(
        path, ["=header", *[f"c{i}" for i in range(len(cells))]], [["-x", *cells], [-1.5, *cells]]
    )
    with path.open(newline="") as handle:
        header, first, second = list(csv.reader(handle))
    assert header[0] == "'=header"
    assert (
        first[1:]
        == second[1:]
        == [
            '\'=HYPERLINK("http://evil")',
            "'+1+1",
            "'-2+3+cmd|' /C calc'!A0",
            "'@SUM(A1:A2)",
            "\ufffd=1",  # a control character never reaches a cell (sitecal._io.CONTROL_CHARACTERS)
            "\ufffd=1",
            "'-",
            "-1.25",
            "-3e-05",
            "-inf",
            "+7",
            "plain",
            "a=b",
        ]
    )
    assert (first[0], second[0]) == ("'-x", "-1.5")


# ---- the key file ------------------------------------------------------------------------------------

HOW_TO_CREATE = (
    "Point privacy.key_file at a key that sitecal created, or at a path that does not exist yet (sitecal "
    "then creates a key there, readable by its owner only)."
)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("content", "size"),
    [
        (b"root:x:0:0:root:/root:/bin/bash\n", "32"),  # a system file
        (b"0123456789abcdef" * 2 + b"\n", "33"),  # a short key
        (b"sitecal-test-key-" + b"0123456789abcdef" * 3 + b"\n", "66"),  # not hexadecimal
        (b"0123456789ABCDEF" * 4 + b"\n", "65"),  # sitecal writes lower case
        (b"0" * 5000, "4096+"),
    ],
)
def test_a_file_sitecal_did_not_create_is_refused(tmp_path: Path, content: bytes, size: str) -> None:
    path = tmp_path / "key"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(OutputError) as info:
        load_or_create_key(path)
    assert str(info.value) == (
        f"{path}: not a pseudonymisation key created by sitecal (one holds 64 hexadecimal digits and a "
        f"newline; this file holds {size} bytes of something else). {HOW_TO_CREATE}"
    )


@pytest.mark.timeout(10)
def test_a_system_file_is_refused_as_no_key() -> None:
    path = Path("/etc/passwd")
    if not path.is_file():
        pytest.skip("no /etc/passwd here")
    with pytest.raises(OutputError, match=r"^/etc/passwd: not a pseudonymisation key created by sitecal"):
        load_or_create_key(path)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_key_others_may_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "key"
    load_or_create_key(path)
    path.chmod(mode)
    with pytest.raises(OutputError) as info:
        load_or_create_key(path)
    assert str(info.value) == (
        f"{path}: the pseudonymisation key may be read or changed by other users (mode {mode:04o}); anyone "
        f"who reads it can recompute every pseudonym. Make it private with 'chmod 600 {path}'."
    )
    path.chmod(0o600)
    assert len(load_or_create_key(path)) == 64


@pytest.mark.timeout(10)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_or_a_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    for path in (fifo, tmp_path):
        with pytest.raises(OutputError) as info:
            load_or_create_key(path)
        assert str(info.value).startswith(f"{path}: ")
        assert str(info.value).endswith(HOW_TO_CREATE)


@pytest.mark.timeout(10)
def test_a_new_key_is_created_private_and_whole(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "key"
    key = load_or_create_key(path)
    assert re.fullmatch(rb"[0-9a-f]{64}", key)
    assert path.read_bytes() == key + b"\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_key(path) == key


# ---- report.dcm --------------------------------------------------------------------------------------


def _pdf(path: Path, text: str) -> None:
    buffer = BytesIO()
    canvas = Canvas(buffer, invariant=True)
    canvas.drawString(72, 720, text)
    canvas.showPage()
    canvas.save()
    path.write_bytes(buffer.getvalue())


@pytest.mark.timeout(30)
def test_report_dcm_uids_follow_the_pdf_bytes(tmp_path: Path) -> None:
    args = {"document_id": "SC-0123456789AB", "title": "t", "created_utc": "2026-12-03T09:08:07Z"}
    _pdf(tmp_path / "a.pdf", "run at 09:08")
    _pdf(tmp_path / "b.pdf", "run at 09:08")  # the same bytes, written again
    _pdf(tmp_path / "c.pdf", "run at 09:53")  # the same inputs 45 minutes later: another PDF
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()
    for name in "abc":
        write_report_dicom(tmp_path / f"{name}.pdf", tmp_path / f"{name}.dcm", **args)
    a, b, c = (pydicom.dcmread(tmp_path / f"{name}.dcm") for name in "abc")
    assert (tmp_path / "a.dcm").read_bytes() == (tmp_path / "b.dcm").read_bytes()
    assert (a.SOPInstanceUID, a.SeriesInstanceUID) == (b.SOPInstanceUID, b.SeriesInstanceUID)
    assert a.SOPInstanceUID != c.SOPInstanceUID
    assert a.file_meta.MediaStorageSOPInstanceUID != c.file_meta.MediaStorageSOPInstanceUID
    assert a.SeriesInstanceUID != c.SeriesInstanceUID


@pytest.mark.timeout(10)
def test_a_file_name_that_is_not_utf8_is_pseudonymised_from_its_bytes() -> None:
    import os
    from pathlib import PurePosixPath

    p = Pseudonymizer(b"k" * 32)
    latin1 = PurePosixPath("site", os.fsdecode(b"M\xfcller.dcm"))  # "Müller" written by an old export
    written = p.path(latin1)
    assert written.endswith(".dcm") and "ller" not in written
    # the bytes decide: another byte gives another pseudonym, the same bytes the same one
    assert written == p.path(PurePosixPath("site", os.fsdecode(b"M\xfcller.dcm")))
    assert written != p.path(PurePosixPath("site", os.fsdecode(b"M\xfdller.dcm")))
    # a UTF-8 name keeps the pseudonym it always had
    assert (
        p("path", "site/Müller.dcm")
        == "F-" + hmac.new(b"k" * 32, "path\0site/Müller.dcm".encode(), hashlib.sha256).hexdigest()[:16]
    )
