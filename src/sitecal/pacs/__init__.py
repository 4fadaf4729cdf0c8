"""Studies from a PACS: the query of ``data.source``, a resumable local store, DICOMweb retrieval.

:func:`retrieve_studies` brings the protocol's studies into ``<output_dir>/.sitecal-pacs/<source id>/``;
the scan then reads them as it reads ``data.dicom_dir``.
"""

from sitecal.pacs.retrieve import Retrieval, retrieve_studies, source_problems

__all__ = ["Retrieval", "retrieve_studies", "source_problems"]
